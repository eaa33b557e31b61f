"""The step pipeline: `launch(batch)` then `complete(launched)`, one code path at two depths.

One step visits each stage once, in order: the scheduler (which first settles what the step
before left, `Settlement`: records the K/V it computed, frees the pages of what it finished, and
then builds the batch) -> the runner (forward, then sampling rows processed and drawn; both device
halves are jobs) -> the postprocessor (constraint advance, stops, jump-forward, detokenize). Then
the step's events are emitted, except a request's final event: it waits for the settlement at the
next schedule, so a finished request's pages are free before its caller hears it finished (the
engine runs that next turn at once: `busy`). No stage calls back up: each returns its result to
this pipeline, and the engine gets a `StepOutcome`.

- depth 0 (the plain step): a step is launched and completed in the same turn; its jobs run
  inline on the engine thread.
- depth 1 (overlap scheduling, the default on CUDA): each turn launches step N+1 before it
  completes step N, and the jobs run in order on one device worker (like kernels on one CUDA
  stream), so the device computes N+1's forward while the host postprocesses N. A sequence whose
  step-N token is still on the device counts it as its next input (`Sequence.pending`) and the
  forward reads it there. After N is complete, N+1 is checked against what postprocessing did: a
  sequence that N finished, or whose tokens changed (jump-forward), gets neither N+1's K/V
  committed nor its sample; it continues from its real state next turn. N+1's bitmasks are built
  only then (its matchers include N's token), so every token is drawn from exactly the logits and
  masks of depth 0: outputs are equal (tests/test_engine_overlap.py). Pages freed while a forward
  is in flight go back to the pool, and only a later schedule, whose forward runs after it on the
  same worker, can hand them out again.

What depth 1 excludes, and why (`overlap_excludes`, the one place that says so):
- speculation: a draft continues a sequence's newest tokens, which at depth 1 are still on the
  device when the next step is scheduled, so no drafter is built (`drafts_possible`);
- batches that need logits on the host (scoring, logprobs, forced tokens' logprobs): the pipeline
  empties, then the batch runs at depth 0;
- retrying a failed device job on part of its batch: at depth 1 the worker has already queued the
  next step on its result, so a failed job fails its step's requests. Inputs fail on the host
  (sampling rows, postprocess), where both depths isolate the request that caused it.
"""

from __future__ import annotations

import logging
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from sgrun.engine.isolation import isolate
from sgrun.engine.model_runner import BatchInputs, ModelRunner, SampledTokens, SampleOutput, Scores, forced_logprobs
from sgrun.engine.outputs import StreamEvent
from sgrun.engine.postprocess import Postprocessor
from sgrun.engine.sampling_rows import SamplingInputs
from sgrun.engine.scheduler import Scheduler, Settlement
from sgrun.engine.scoring import ScoringSequence
from sgrun.engine.sequence import Sequence
from sgrun.engine.speculative import Speculation
from sgrun.errors import EngineFatalError

log = logging.getLogger("sgrun.engine")


def drafts_possible(depth: int) -> bool:
    """Speculation needs a step's tokens on the host before the next step is scheduled."""
    return depth == 0


def overlap_excludes(items: list[tuple[Sequence, int]]) -> bool:
    """Whether this batch needs logits on the host (scores; logprobs, forced tokens' included)."""
    return any(isinstance(seq, ScoringSequence) or seq.params.logprobs is not None for seq, _ in items)


@dataclass
class StepOutcome:
    """What one turn of the pipeline hands the engine."""
    finished: list[Sequence] = field(default_factory=list)     # ended normally, settled (pages freed)
    failed: dict[str, str] = field(default_factory=dict)       # request id -> why a stage failed on it
    unschedulable: Sequence | None = None                      # fits not even in an empty pool
    events: list[tuple[Sequence, StreamEvent]] = field(default_factory=list)


@dataclass
class Launched:
    """A step whose device jobs are queued: the batch and what the host knew at launch."""
    depth: int
    items: list[tuple[Sequence, int]]
    inputs: BatchInputs
    starts: list[int]                    # each sequence's num_computed at launch
    known: list[list[int]]               # the tokens it computes, draft included (without a pending last one)
    forward: Future
    committed: list[tuple[Sequence, int]] = field(default_factory=list)
    sampled: list[Sequence] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    sampling: SamplingInputs | None = None
    sample: Future | None = None
    token_of: dict[int, int] = field(default_factory=dict)   # seq_id -> first drawn token, once read
    accepted: dict[int, int] = field(default_factory=dict)   # seq_id -> draft tokens accepted


def _done(fn: Callable[..., Any], *args: Any) -> Future:
    """Run fn now; its result (or exception) as a completed Future (depth 0's 'worker')."""
    fut: Future = Future()
    try:
        fut.set_result(fn(*args))
    except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
        fut.set_exception(exc)
    return fut


class StepPipeline:
    """The engine's step at `depth` 0 or 1, made of the stages it is handed: the scheduler, the
    model runner, the postprocessor and the speculation (never the Engine)."""

    def __init__(self, scheduler: Scheduler, runner: ModelRunner, post: Postprocessor, speculation: Speculation,
                 depth: int, device: torch.device):
        self.scheduler, self.runner, self.post = scheduler, runner, post
        self.speculation = speculation
        self.depth = depth
        self.worker: ThreadPoolExecutor | None = None
        if depth:
            # The worker launches kernels (Triton's on the thread's current device): put it on ours.
            init = (lambda: torch.cuda.set_device(device)) if device.type == "cuda" else None
            self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sgrun-device", initializer=init)
        self.inflight: Launched | None = None
        self.dropped = 0      # step results discarded because the step before finished or changed the sequence
        self.num_steps = 0
        self.step_time_total = 0.0
        self._out = StepOutcome()
        self._last = Settlement()                  # what the next schedule settles
        self._finishing: list[Sequence] = []        # what this turn's postprocess finished
        self._final_events: list[tuple[Sequence, StreamEvent]] = []   # held until then

    @property
    def busy(self) -> bool:
        """A step is in flight, or the last one's settlement waits for the next turn."""
        return self.inflight is not None or bool(self._last)

    # --- one turn ---------------------------------------------------------------------------
    def step(self) -> StepOutcome:
        t0 = time.perf_counter()
        self._out = out = StepOutcome()
        last, self._last = self._last, Settlement()
        items = self.scheduler.schedule(last).items
        self._release(last)
        if not items:
            self.drain()
            out.unschedulable = self.scheduler.unschedulable()
            return self._hand_back([])
        depth = self.depth
        if depth and overlap_excludes(items):
            depth = 0
            self.drain()
            items = [(s, n) for s, n in items if self._live(s)]
            if not items:   # the drained step finished all of them
                return self._hand_back([])
        prev = self.inflight
        cur = self.launch(items, prev, depth)
        if prev is not None:
            self.inflight = None
            self.complete(prev)
        self._launch_sampling(cur, self._still_valid(cur, prev))
        if depth == 0:
            self.complete(cur)
        else:
            self.inflight = cur
        self.num_steps += 1
        self.step_time_total += time.perf_counter() - t0
        return self._hand_back([(s, n, cur.accepted.get(s.seq_id)) for s, n in cur.committed])

    def drain(self) -> None:
        """Complete the step in flight; the pipeline is then empty."""
        if self.inflight is not None:
            prev, self.inflight = self.inflight, None
            self.complete(prev)

    def close(self) -> StepOutcome:
        """Complete what is in flight and settle everything: the engine is stopping."""
        self._out = StepOutcome()
        self.drain()
        if self.worker is not None:
            self.worker.shutdown(wait=True)
        self._hand_back([])
        last, self._last = self._last, Settlement()
        self.scheduler.settle(last)
        self._release(last)
        return self._out

    def _hand_back(self, computed: list[tuple[Sequence, int, int | None]]) -> StepOutcome:
        """Leave what ran and what finished for the next schedule; emit the events, holding
        back the final ones until then."""
        out = self._out
        self._last, self._finishing = Settlement(computed, self._finishing), []
        for seq, event in out.events:
            if event.finish_reason is None:
                seq.emit(event)
            else:
                self._final_events.append((seq, event))
        return out

    def _release(self, last: Settlement) -> None:
        """After the scheduler settled `last`: its finished requests go to the engine and their
        final events out (not to a request aborted meanwhile: that one already had its last event)."""
        self._out.finished.extend(last.finished)
        held, self._final_events = self._final_events, []
        for seq, event in held:
            if seq.abort_cause is None:
                seq.emit(event)

    # --- launch -----------------------------------------------------------------------------
    def launch(self, items: list[tuple[Sequence, int]], prev: Launched | None, depth: int) -> Launched:
        """Queue the batch's forward. `prev`: the step still in flight (depth 1), whose drawn
        tokens some of these sequences take as their last input, read on the device."""
        future = {s.seq_id: j for j, s in enumerate(prev.sampled)} if prev is not None else None
        inputs = self.runner.prepare(items, future)
        job = self._submit(depth, self._forward_job, inputs, prev.sample if prev is not None else None)
        return Launched(depth, items, inputs, [s.num_computed for s, _ in items],
                        [s.token_slice(s.num_computed, s.num_computed + n) for s, n in items], job)

    def _submit(self, depth: int, fn: Callable[..., Any], *args: Any) -> Future:
        return self.worker.submit(fn, *args) if depth and self.worker is not None else _done(fn, *args)

    def _forward_job(self, inputs: BatchInputs, prev_sample: Future | None) -> torch.Tensor:
        prev_tokens = prev_sample.result().drawn[0] if prev_sample is not None else None
        return self.runner.run(inputs, prev_tokens)

    def _sample_job(self, forward: Future, rows: list[int], si: SamplingInputs) -> SampleOutput:
        logits = forward.result()
        if len(rows) == logits.shape[0] and rows == list(range(len(rows))):
            # Every row, in order (a plain decode batch): greedy rows with nothing to apply are
            # drawn in place; else a copy, without index_select's index tensor (30 us at batch 1).
            # A copy still: run_sampling processes its rows in place.
            plain = self.runner.draw_plain_greedy(si, logits)
            return plain if plain is not None else self.runner.run_sampling(si, logits.clone())
        return self.runner.run_sampling(si, logits.index_select(0, torch.tensor(rows, dtype=torch.long).to(logits.device)))

    def _still_valid(self, cur: Launched, prev: Launched | None) -> list[bool]:
        """Which of cur's items still compute what the sequence really holds (all, at depth 0);
        those are the ones the scheduler commits."""
        valid = []
        for (seq, n), start, known in zip(cur.items, cur.starts, cur.known):
            used: list[int] | None = known
            if len(known) < n:   # its last input was prev's drawn token
                token = prev.token_of.get(seq.seq_id) if prev is not None else None
                used = known + [token] if token is not None else None
            valid.append(used is not None and self._live(seq) and seq.num_computed == start
                         and seq.token_slice(start, start + n) == used)
        self.dropped += valid.count(False)
        cur.committed = [item for item, ok in zip(cur.items, valid) if ok]
        return valid

    def _launch_sampling(self, cur: Launched, valid: list[bool]) -> None:
        """Build the sampling rows on the host (after the previous step's postprocess: the
        matchers include its tokens) and queue their processing and draw."""
        rows: list[int] = []
        sampled: list[tuple[Sequence, list[int]]] = []
        row = 0
        for (seq, n), start, want, ok in zip(cur.items, cur.starts, cur.inputs.wanted, valid):
            if want is None:
                continue
            row += len(want)
            # Only logits that predict the sequence's real next token are drawn from.
            if ok and not isinstance(seq, ScoringSequence) and start + n == len(seq.tokens) + len(seq.draft):
                sampled.append((seq, list(range(row - len(seq.draft) - 1, row))))
        if not sampled:
            return
        try:
            si = self.runner.prepare_sampling([s for s, _ in sampled])
        except Exception:  # noqa: BLE001 - a constraint failed on the host: fail whose it was, sample the rest
            isolate(sampled, self._prepare_rows, self._fail_in("sampling"))
            sampled = [(s, r) for s, r in sampled if self._live(s)]
            if not sampled:
                return
            si = self.runner.prepare_sampling([s for s, _ in sampled])
        cur.sampled = [s for s, _ in sampled]
        cur.rows = [r for _, rs in sampled for r in rs]
        cur.sampling = si
        cur.sample = self._submit(cur.depth, self._sample_job, cur.forward, cur.rows, si)
        for seq in cur.sampled:
            seq.pending = 1

    def _prepare_rows(self, batch: list[tuple[Sequence, list[int]]]) -> list[None]:
        self.runner.prepare_sampling([s for s, _ in batch])
        return [None] * len(batch)

    # --- complete ---------------------------------------------------------------------------
    def complete(self, step: Launched) -> None:
        """Read the step's drawn tokens, settle its drafts, postprocess. A failed device job is
        run again in parts at depth 0 (isolation.py) and fails the step's requests at depth 1."""
        for seq in step.sampled:
            seq.pending = 0
        try:
            logits = step.forward.result()
            got = (self.runner.finish_sampling(step.sampled, step.sampling, step.sample.result())
                   if step.sample is not None else [])
        except EngineFatalError:
            raise
        except Exception as exc:  # noqa: BLE001 - see the module docstring
            results = self._rerun_in_parts(step) if step.depth == 0 else self._fail_step(step, exc)
        else:
            results = list(zip(step.sampled, got))
            for seq, res in results:
                step.token_of[seq.seq_id] = res.tokens[0]
            if step.depth == 0:
                results += self._host_logits(step, logits, dict(results))
        self._settle_and_postprocess(step, results)

    def _host_logits(self, step: Launched, logits: torch.Tensor,
                     sampled: dict[Sequence, Any]) -> list[tuple[Sequence, Scores]]:
        """Depth 0 only: scores, and the logprobs of tokens jump-forward forced last step."""
        scores = []
        for (seq, n), lg in zip(step.items, self.runner.split(step.inputs, logits)):
            if lg is None or not self._live(seq):
                continue
            if isinstance(seq, ScoringSequence):
                scores.append((seq, self.runner.score(seq, lg)))
            elif seq in sampled and seq.logprobs_pending_from is not None and seq.params.logprobs is not None:
                sampled[seq].forced = forced_logprobs(seq, lg, seq.params.logprobs)
        return scores

    def _rerun_in_parts(self, step: Launched) -> list[tuple[Sequence, SampledTokens | Scores]]:
        """The step again, its forward then its sampling on halves of the batch down to single
        requests, so only the request whose input fails a stage fails (isolation.py)."""
        ran = [(item, lg) for item, lg in isolate(step.committed, self.runner.forward, self._fail_in("forward"))
               if self._live(item[0])]
        step.committed = [item for item, _ in ran]
        sampled = {s.seq_id for s in step.sampled}
        wanted = [(seq, lg) for (seq, _), lg in ran
                  if lg is not None and (seq.seq_id in sampled or isinstance(seq, ScoringSequence))]
        return [(seq, res) for (seq, _), res in isolate(wanted, self.runner.sample, self._fail_in("sampling"))
                if self._live(seq)]

    def _fail_step(self, step: Launched, exc: Exception) -> list:
        log.error("device step failed: %s: %s", type(exc).__name__, exc)
        fail = self._fail_in("device step")
        for item in step.items:
            if self._live(item[0]):
                fail(item, exc)
        return []

    def _settle_and_postprocess(self, step: Launched, results: list[tuple[Sequence, Any]]) -> None:
        starts = {seq.seq_id: (start, n) for (seq, n), start in zip(step.items, step.starts)}
        for seq, res in results:
            if isinstance(res, Scores):
                start, n = starts[seq.seq_id]
                res.done = start + n == len(seq.tokens)
            elif res.accepted_draft is not None:
                self.speculation.settle(seq, res.accepted_draft)
                step.accepted[seq.seq_id] = res.accepted_draft
        live = [(seq, res) for seq, res in results if self._live(seq)]
        for (seq, _), event in isolate(live, self._postprocess, self._fail_in("postprocess"), one_at_a_time=True):
            if event is None:
                continue
            self._out.events.append((seq, event))
            if event.finish_reason is not None:
                self._finishing.append(seq)

    def _postprocess(self, items: list[tuple[Sequence, Any]]) -> list[StreamEvent | None]:
        # A sibling sample's failure may have ended the request meanwhile.
        return [self.post.accept(seq, res) if self._live(seq) else None for seq, res in items]

    # --- failures ---------------------------------------------------------------------------
    def _live(self, seq: Sequence) -> bool:
        return not seq.is_finished and seq.finish_reason is None and seq.request_id not in self._out.failed

    def _fail_in(self, stage: str) -> Callable[[tuple[Sequence, Any], Exception], None]:
        def fail(item: tuple[Sequence, Any], exc: Exception) -> None:
            seq = item[0]
            log.error("request %s failed in %s:\n%s", seq.request_id, stage,
                      "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            self._out.failed.setdefault(seq.request_id, f"{stage} failed: {type(exc).__name__}: {exc}"[:500])
        return fail
