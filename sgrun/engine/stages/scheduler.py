"""Continuous batching at token granularity.

Each step (step.py) enters the scheduler once, at its start: `schedule(last)` first settles what
the step before left (`Settlement`: the K/V it computed, the requests it finished, whose pages go
back), then builds the batch: every running decode gets its one token first, then unfinished prefills continue in
chunks, then waiting requests are admitted (longest cached prefix first when the queue is
long) while the token budget, the running cap and the pool allow. When the pool runs short,
unlocked cache leaves are evicted, then the most recently admitted request is preempted (its
pages freed; it is recomputed later from its tokens).

The scheduler owns all page and radix-cache bookkeeping: allocation at scheduling, the prompt's
insertion into the cache as it is computed (`commit`), locking of the path a request uses, and
release (with insertion of what was computed) when a request finishes or is preempted.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from sgrun.engine.state.page_pool import PagePool
from sgrun.engine.state.radix_cache import RadixCache
from sgrun.engine.state.sequence import Sequence, Status

# With more waiting requests than this, admission order follows the cached-prefix length.
CACHE_AWARE_QUEUE_LEN = 8
# A request passed over this many times is admitted next regardless of its cache hit.
MAX_PASSED_OVER = 16
# How many queued requests the cache-aware ordering looks at.
CACHE_AWARE_WINDOW = 128


@dataclass
class ScheduledBatch:
    items: list[tuple[Sequence, int]]   # (sequence, number of new tokens computed this step)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.items)


@dataclass
class Settlement:
    """What one step leaves for the next schedule: (sequence, tokens computed, draft tokens
    accepted or None without a draft), and the sequences it finished."""
    computed: list[tuple[Sequence, int, int | None]] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.computed or self.finished)


class Scheduler:
    def __init__(self, pool: PagePool, cache: RadixCache | None, max_running: int, max_batch_tokens: int,
                 drafter: Callable[[Sequence, int], list[int]] | None = None):
        self.pool = pool
        # Speculative decoding (ngram_draft.NgramDrafter.draft): (decoding sequence, token budget left
        # minus its own token) -> draft tokens the verify forward computes after it this step.
        self.drafter = drafter
        self.cache = cache
        self.ps = pool.page_size
        self.max_running = max_running
        self.max_batch_tokens = max_batch_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._admit_counter = itertools.count()
        self.num_preemptions = 0
        self.prompt_tokens_total = 0
        self.cached_tokens_total = 0

    # --- queue ----------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # --- pages ----------------------------------------------------------------------------
    def _pages_needed(self, seq: Sequence, upto_tokens: int) -> int:
        return max(0, -(-upto_tokens // self.ps) - len(seq.page_table))

    def _reserve(self, n: int) -> bool:
        if n <= self.pool.num_free:
            return True
        if self.cache is not None:
            self.cache.evict(n - self.pool.num_free)
        return n <= self.pool.num_free

    def release(self, seq: Sequence, cache_tokens: bool = True) -> None:
        """Give back a sequence's pages; cache its computed tokens first when the cache is on."""
        # Never past the sequence's tokens: K/V computed for rejected draft positions is garbage.
        if self.cache is not None and cache_tokens:
            self.insert_into_cache(seq, min(seq.num_computed, len(seq.tokens)))
        if self.cache is not None and seq.locked_node is not None:
            self.cache.unlock(seq.locked_node)
        seq.locked_node = None
        self.pool.decref(seq.page_table)
        seq.page_table = []
        seq.num_computed = 0
        seq.kv_stale_from = None
        seq.cache_inserted_len = 0
        seq.speculation.draft = []

    def settle(self, last: Settlement) -> None:
        """Record the K/V the last step computed, then release what it finished. A request
        aborted since (its pages already freed) has nothing left to record."""
        computed = [(seq, n, accepted) for seq, n, accepted in last.computed if not seq.is_finished]
        self.commit([(seq, n) for seq, n, _ in computed])
        for seq, _, accepted in computed:
            if accepted is not None:
                self.settle_draft(seq, accepted)   # drops stale K/V too, before it trims pages
            else:
                seq.drop_stale_kv()
        for seq in last.finished:
            self.finish(seq)

    def settle_draft(self, seq: Sequence, accepted: int) -> None:
        """After a verify step: only the first `accepted` draft positions hold K/V of tokens the
        sequence keeps; forget the rest and give back the pages only they used (the next token's
        page is kept). The radix cache never saw them: commit caches prompt tokens only."""
        seq.num_computed -= len(seq.speculation.draft) - accepted
        seq.speculation.draft = []
        seq.drop_stale_kv()   # jump-forward rewrote some of the accepted positions (sequence.py)
        keep = -(-(seq.num_computed + 1) // self.ps)
        if len(seq.page_table) > keep:
            self.pool.decref(seq.page_table[keep:])
            del seq.page_table[keep:]

    def commit(self, items: list[tuple[Sequence, int]]) -> None:
        """Record that the batch's tokens were computed (their K/V are in the pool). The prompt
        is cached chunk by chunk, so requests sharing it can start from it while this one is
        still prefilling."""
        for seq, n in items:
            seq.num_computed += n
            if self.cache is not None and seq.cache_inserted_len < seq.prompt_len:
                self.insert_into_cache(seq, min(seq.num_computed, seq.prompt_len))

    def insert_into_cache(self, seq: Sequence, num_tokens: int) -> None:
        aligned = (num_tokens // self.ps) * self.ps
        if self.cache is None or aligned <= seq.cache_inserted_len:
            return
        node = self.cache.insert(seq.tokens[:aligned], seq.page_table[: aligned // self.ps])
        self.cache.lock(node)
        if seq.locked_node is not None:
            self.cache.unlock(seq.locked_node)
        seq.locked_node = node
        seq.cache_inserted_len = aligned
        self.cache.enforce_capacity()

    def _preempt(self, victim: Sequence) -> None:
        self.running.remove(victim)
        self.release(victim)
        victim.status = Status.WAITING
        victim.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(victim)

    # --- one step -------------------------------------------------------------------------
    def schedule(self, last: Settlement | None = None) -> ScheduledBatch:
        if last:
            self.settle(last)
        budget = self.max_batch_tokens
        items: list[tuple[Sequence, int]] = []
        scheduled: set[int] = set()
        # Decodes first (one token each), then continuing prefills, oldest first.
        order = sorted(self.running, key=lambda s: (len(s.tokens) - s.num_computed > 1, s.admit_order))
        for seq in order:
            if seq.status is not Status.RUNNING or budget <= 0:
                continue
            if self.drafter is not None and not seq.speculation.draft:
                seq.speculation.draft = self.drafter(seq, budget - 1)
                if seq.speculation.draft and not self._reserve(self._pages_needed(seq, seq.num_tokens)):
                    seq.speculation.draft = []   # a draft never preempts anyone: run the plain decode
            n = min(seq.num_tokens - seq.num_computed, budget)
            if n <= 0:
                continue
            while not self._reserve(self._pages_needed(seq, seq.num_computed + n)):
                victim = max(self.running, key=lambda s: s.admit_order)
                if victim.seq_id in scheduled:
                    budget += sum(k for s, k in items if s is victim)
                    items = [(s, k) for s, k in items if s is not victim]
                    scheduled.discard(victim.seq_id)
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.status is not Status.RUNNING:
                continue
            seq.page_table.extend(self.pool.alloc(self._pages_needed(seq, seq.num_computed + n)))
            items.append((seq, n))
            scheduled.add(seq.seq_id)
            budget -= n
        deferred: list[Sequence] = []
        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            seq = self._next_waiting()
            if self._waits_for_shared_prefill(seq):
                deferred.append(seq)
                continue
            if not self._admit(seq, budget, items):
                self.waiting.appendleft(seq)
                break
            budget -= items[-1][1]
        self.waiting.extendleft(reversed(deferred))
        return ScheduledBatch(items)

    def _waits_for_shared_prefill(self, seq: Sequence) -> bool:
        """Wait while a running request is still prefilling a prefix this one shares beyond what
        the cache holds (samples 1..n-1 of a request, agents sending the same system prompt at
        once): one step later that prefix is in the cache instead of being computed twice."""
        if self.cache is None:
            return False
        ps = self.ps
        first_page = seq.tokens[:ps]
        cached = None
        for r in self.running:
            if r.num_computed >= r.prompt_len or r.tokens[:ps] != first_page:
                continue
            if cached is None:
                cached = self.cache.match_len(seq.tokens)
            limit = min(len(seq.tokens) - 1, r.prompt_len)
            common = 0
            while common + ps <= limit and seq.tokens[common:common + ps] == r.tokens[common:common + ps]:
                common += ps
            if common > cached:
                return True
        return False

    def _next_waiting(self) -> Sequence:
        if self.cache is None or len(self.waiting) <= CACHE_AWARE_QUEUE_LEN:
            return self.waiting.popleft()
        window = list(itertools.islice(self.waiting, CACHE_AWARE_WINDOW))
        starved = [s for s in window if s.passed_over >= MAX_PASSED_OVER]
        best = starved[0] if starved else max(window, key=lambda s: self.cache.match_len(s.tokens))
        for s in window:
            if s is best:
                break
            s.passed_over += 1
        self.waiting.remove(best)
        return best

    def _admit(self, seq: Sequence, budget: int, items: list[tuple[Sequence, int]]) -> bool:
        matched_pages: list[int] = []
        node = None
        if self.cache is not None:
            matched_pages, node = self.cache.match(seq.tokens, limit=seq.cache_match_limit)
        matched = len(matched_pages) * self.ps
        n = min(len(seq.tokens) - matched, budget)
        need = -(-(matched + n) // self.ps) - len(matched_pages)
        if self.cache is not None:
            self.cache.lock(node)  # keep the matched path from being evicted by _reserve
        if not self._reserve(need):
            if self.cache is not None:
                self.cache.unlock(node)
            return False
        self.pool.incref(matched_pages)
        seq.page_table = matched_pages + self.pool.alloc(need)
        seq.num_computed = matched
        seq.locked_node = node
        seq.cache_inserted_len = matched
        if not seq.admitted:
            seq.admitted = True
            seq.cached_tokens = min(matched, seq.prompt_len)
            self.prompt_tokens_total += seq.prompt_len
            self.cached_tokens_total += seq.cached_tokens
        seq.admit_order = next(self._admit_counter)
        seq.status = Status.RUNNING
        self.running.append(seq)
        items.append((seq, n))
        return True

    def unschedulable(self) -> Sequence | None:
        """After a schedule() that found nothing to run: the head of the queue if nothing is
        running either, so it does not fit even in an empty pool and never will."""
        return self.waiting[0] if self.waiting and not self.running else None

    def finish(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        if seq.page_table:
            self.release(seq)
        seq.status = Status.FINISHED
