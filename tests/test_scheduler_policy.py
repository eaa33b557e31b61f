"""Scheduler policy without a model: cache-aware admission order, its starvation bound, and
the per-step token budget."""

from __future__ import annotations

import torch

from sgrun.engine.state.page_pool import PagePool
from sgrun.engine.state.radix_cache import RadixCache
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.engine.stages.scheduler import CACHE_AWARE_QUEUE_LEN, MAX_PASSED_OVER, Scheduler
from sgrun.engine.state.sequence import Sequence


def seq(i: int, tokens: list[int]) -> Sequence:
    return Sequence(seq_id=i, request_id=str(i), index=0, tokens=list(tokens), prompt_len=len(tokens),
                    params=SamplingParams(), detok=None, emit=lambda ev: None)


def make(max_running=1, budget=4096):
    pool = PagePool(1, 512, 4, 1, 2, torch.float32)
    cache = RadixCache(pool)
    return pool, cache, Scheduler(pool, cache, max_running=max_running, max_batch_tokens=budget)


def test_longest_cached_prefix_admitted_first_with_a_long_queue():
    pool, cache, sched = make()
    hot = list(range(64))
    cache.insert(hot, pool.alloc(16))
    cold = [seq(i, [1000 + i] * 40) for i in range(CACHE_AWARE_QUEUE_LEN + 2)]
    for s in cold:
        sched.add(s)
    warm = seq(99, hot + [5, 6, 7])
    sched.add(warm)
    batch = sched.schedule()
    assert batch.items[0][0] is warm
    assert warm.cached_tokens == 64


def test_passed_over_requests_are_not_starved():
    pool, cache, sched = make()
    hot = list(range(64))
    cache.insert(hot, pool.alloc(16))
    victim = seq(0, [7] * 40)
    sched.add(victim)
    for i in range(1, CACHE_AWARE_QUEUE_LEN + 1):
        sched.add(seq(i, [9000 + i] * 40))
    admitted = []
    for i in range(MAX_PASSED_OVER + 2):
        sched.add(seq(100 + i, hot + [i]))   # a steady stream of cache hits
        batch = sched.schedule()
        s = batch.items[0][0]
        admitted.append(s)
        sched.finish(s)
    assert victim in admitted


def test_token_budget_chunks_a_long_prefill_and_keeps_decodes_running():
    pool, cache, sched = make(max_running=4, budget=16)
    short = seq(2, [5, 6, 7, 8])
    sched.add(short)
    assert sched.schedule().items == [(short, 4)]
    short.num_computed = 4
    short.tokens.append(9)                 # it sampled a token: now it decodes one per step
    long = seq(1, list(range(100, 164)))
    sched.add(long)
    for step in range(4):
        batch = sched.schedule()
        assert batch.items[0] == (short, 1)          # the decode is never stalled
        assert batch.items[1] == (long, 15)          # the prefill gets the rest of the budget
        short.num_computed += 1
        short.tokens.append(10 + step)
        long.num_computed += 15
