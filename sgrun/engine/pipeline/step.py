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
from functools import partial
from typing import Any, Callable

import torch

from sgrun.engine.state.isolation import isolate
from sgrun.engine.stages.model_runner import BatchInputs, ModelRunner, SampleOutput
from sgrun.engine.state.sampled import SampledTokens, Scores
from sgrun.engine.state.outputs import StreamEvent
from sgrun.engine.stages.postprocess import Postprocessor
from sgrun.engine.parts.sampling_rows import SamplingInputs
from sgrun.engine.stages.scheduler import Scheduler, Settlement
from sgrun.engine.state.scoring import ScoringSequence
from sgrun.engine.state.sequence import Sequence
from sgrun.engine.stages.speculative import Speculation
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
    """What one turn of the pipeline hands the engine. The turn's stages record into it: the
    events, and the requests a stage failed on (`fail`, which `isolate` calls per request)."""
    finished: list[Sequence] = field(default_factory=list)     # ended normally, settled (pages freed)
    failed: dict[str, str] = field(default_factory=dict)       # request id -> why a stage failed on it
    unschedulable: Sequence | None = None                      # fits not even in an empty pool
    events: list[tuple[Sequence, StreamEvent]] = field(default_factory=list)

    def live(self, seq: Sequence) -> bool:
        """Not finished, not ending, and no stage of this turn failed on its request."""
        return not seq.is_finished and seq.output.finish_reason is None and seq.request_id not in self.failed

    def fail(self, stage: str, item: tuple[Sequence, Any], exc: Exception) -> None:
        """`stage` failed on item's request: log it and end the request (isolation.py's on_fail)."""
        seq = item[0]
        log.error("request %s failed in %s:\n%s", seq.request_id, stage,
                  "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        self.failed.setdefault(seq.request_id, f"{stage} failed: {type(exc).__name__}: {exc}"[:500])

    def fails_in(self, stage: str) -> Callable[[tuple[Sequence, Any], Exception], None]:
        return partial(self.fail, stage)


@dataclass
class SamplingJob:
    """A step's sampling, queued: the sequences drawn for, their rows, and the drawn result."""
    seqs: list[Sequence]
    inputs: SamplingInputs
    drawn: Future                        # -> SampleOutput


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
    sampling: SamplingJob | None = None
    drawn: dict[int, SampledTokens] = field(default_factory=dict)   # seq_id -> its tokens, once read


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
    model runner, the postprocessor and the speculation (never the Engine). Each turn's state
    is its StepOutcome, handed from stage to stage; what lives here outlasts a turn."""

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
        self._last = Settlement()                  # what the next schedule settles
        self._final_events: list[tuple[Sequence, StreamEvent]] = []   # held until then

    @property
    def busy(self) -> bool:
        """A step is in flight, or the last one's settlement waits for the next turn."""
        return self.inflight is not None or bool(self._last)

    # --- one turn ---------------------------------------------------------------------------
    def step(self) -> StepOutcome:
        t0 = time.perf_counter()
        out = StepOutcome()
        last, self._last = self._last, Settlement()
        items = self.scheduler.schedule(last).items
        self._release(last, out)
        if not items:
            self._drain(out)
            out.unschedulable = self.scheduler.unschedulable()
            return self._hand_back(out, [])
        depth = self.depth
        if depth and overlap_excludes(items):
            depth = 0
            self._drain(out)
            items = [(s, n) for s, n in items if out.live(s)]
            if not items:   # the drained step finished all of them
                return self._hand_back(out, [])
        prev = self.inflight
        cur = self.launch(items, prev, depth)
        if prev is not None:
            self.inflight = None
            self.complete(prev, out)
        self._launch_sampling(cur, self._still_valid(cur, prev, out), out)
        if depth == 0:
            self.complete(cur, out)
        else:
            self.inflight = cur
        self.num_steps += 1
        self.step_time_total += time.perf_counter() - t0
        return self._hand_back(out, [(s, n, _accepted(cur, s)) for s, n in cur.committed])

    def _drain(self, out: StepOutcome) -> None:
        """Complete the step in flight; the pipeline is then empty."""
        if self.inflight is not None:
            prev, self.inflight = self.inflight, None
            self.complete(prev, out)

    def close(self) -> StepOutcome:
        """Complete what is in flight and settle everything: the engine is stopping."""
        out = StepOutcome()
        self._drain(out)
        if self.worker is not None:
            self.worker.shutdown(wait=True)
        self._hand_back(out, [])
        last, self._last = self._last, Settlement()
        self.scheduler.settle(last)
        self._release(last, out)
        return out

    def _hand_back(self, out: StepOutcome, computed: list[tuple[Sequence, int, int | None]]) -> StepOutcome:
        """Leave what ran and what finished for the next schedule; emit the events, holding
        back the final ones until then."""
        finishing = [seq for seq, event in out.events if event.finish_reason is not None]
        self._last = Settlement(computed, finishing)
        for seq, event in out.events:
            if event.finish_reason is None:
                seq.emit(event)
            else:
                self._final_events.append((seq, event))
        return out

    def _release(self, last: Settlement, out: StepOutcome) -> None:
        """After the scheduler settled `last`: its finished requests go to the engine and their
        final events out (not to a request aborted meanwhile: that one already had its last event)."""
        out.finished.extend(last.finished)
        held, self._final_events = self._final_events, []
        for seq, event in held:
            if seq.output.abort_cause is None:
                seq.emit(event)

    # --- launch -----------------------------------------------------------------------------
    def launch(self, items: list[tuple[Sequence, int]], prev: Launched | None, depth: int) -> Launched:
        """Queue the batch's forward. `prev`: the step still in flight (depth 1), whose drawn
        tokens some of these sequences take as their last input, read on the device."""
        sampling = prev.sampling if prev is not None else None
        future = {s.seq_id: j for j, s in enumerate(sampling.seqs)} if sampling is not None else None
        inputs = self.runner.prepare(items, future)
        job = self._submit(depth, self._forward_job, inputs, sampling.drawn if sampling is not None else None)
        return Launched(depth, items, inputs, [s.num_computed for s, _ in items],
                        [s.token_slice(s.num_computed, s.num_computed + n) for s, n in items], job)

    def _submit(self, depth: int, fn: Callable[..., Any], *args: Any) -> Future:
        return self.worker.submit(fn, *args) if depth and self.worker is not None else _done(fn, *args)

    def _forward_job(self, inputs: BatchInputs, prev_drawn: Future | None) -> torch.Tensor:
        prev_tokens = prev_drawn.result().drawn[0] if prev_drawn is not None else None
        return self.runner.run(inputs, prev_tokens)

    def _sample_job(self, forward: Future, rows: list[int], si: SamplingInputs) -> SampleOutput:
        return self.runner.sample_logits(si, forward.result(), rows)

    def _still_valid(self, cur: Launched, prev: Launched | None, out: StepOutcome) -> list[bool]:
        """Which of cur's items still compute what the sequence really holds (all, at depth 0);
        those are the ones the scheduler commits."""
        valid = []
        for (seq, n), start, known in zip(cur.items, cur.starts, cur.known):
            used: list[int] | None = known
            if len(known) < n:   # its last input was prev's drawn token
                got = prev.drawn.get(seq.seq_id) if prev is not None else None
                used = known + [got.tokens[0]] if got is not None else None
            valid.append(used is not None and out.live(seq) and seq.num_computed == start
                         and seq.token_slice(start, start + n) == used)
        self.dropped += valid.count(False)
        cur.committed = [item for item, ok in zip(cur.items, valid) if ok]
        return valid

    def _launch_sampling(self, cur: Launched, valid: list[bool], out: StepOutcome) -> None:
        """Build the sampling rows on the host (after the previous step's postprocess: the
        matchers include its tokens) and queue their processing and draw."""
        sampled: list[tuple[Sequence, list[int]]] = []
        row = 0
        for (seq, n), start, want, ok in zip(cur.items, cur.starts, cur.inputs.wanted, valid):
            if want is None:
                continue
            row += len(want)
            # Only logits that predict the sequence's real next token are drawn from.
            if ok and not isinstance(seq, ScoringSequence) and start + n == len(seq.tokens) + len(seq.speculation.draft):
                sampled.append((seq, list(range(row - len(seq.speculation.draft) - 1, row))))
        if not sampled:
            return
        try:
            si = self.runner.prepare_sampling([s for s, _ in sampled])
        except Exception:  # noqa: BLE001 - a constraint failed on the host: fail whose it was, sample the rest
            isolate(sampled, self._prepare_rows, out.fails_in("sampling"))
            sampled = [(s, r) for s, r in sampled if out.live(s)]
            if not sampled:
                return
            si = self.runner.prepare_sampling([s for s, _ in sampled])
        rows = [r for _, rs in sampled for r in rs]
        cur.sampling = SamplingJob([s for s, _ in sampled], si, self._submit(cur.depth, self._sample_job,
                                                                             cur.forward, rows, si))
        for seq in cur.sampling.seqs:
            seq.pending = 1

    def _prepare_rows(self, batch: list[tuple[Sequence, list[int]]]) -> list[None]:
        self.runner.prepare_sampling([s for s, _ in batch])
        return [None] * len(batch)

    # --- complete ---------------------------------------------------------------------------
    def complete(self, step: Launched, out: StepOutcome) -> None:
        """Read the step's drawn tokens, settle its drafts, postprocess. A failed device job is
        run again in parts at depth 0 (isolation.py) and fails the step's requests at depth 1."""
        job = step.sampling
        seqs = job.seqs if job is not None else []
        for seq in seqs:
            seq.pending = 0
        try:
            logits = step.forward.result()
            # Depth 0 reads logits on the host too: scores, and the rows of tokens jump-forward forced.
            split = self.runner.split(step.inputs, logits) if step.depth == 0 else [None] * len(step.items)
            of = {seq.seq_id: lg for (seq, _), lg in zip(step.items, split)}
            got = (self.runner.finish_sampling(seqs, job.inputs, job.drawn.result(), [of[s.seq_id] for s in seqs])
                   if job is not None else [])
        except EngineFatalError:
            raise
        except Exception as exc:  # noqa: BLE001 - see the module docstring
            results = self._rerun_in_parts(step, out) if step.depth == 0 else self._fail_step(step, exc, out)
        else:
            results = list(zip(seqs, got)) + [
                (seq, self.runner.score(seq, lg)) for (seq, _), lg in zip(step.items, split)
                if lg is not None and isinstance(seq, ScoringSequence) and out.live(seq)]
        self._settle_and_postprocess(step, results, out)

    def _rerun_in_parts(self, step: Launched, out: StepOutcome) -> list[tuple[Sequence, SampledTokens | Scores]]:
        """The step again, its forward then its sampling on halves of the batch down to single
        requests, so only the request whose input fails a stage fails (isolation.py)."""
        ran = [(item, lg) for item, lg in isolate(step.committed, self.runner.forward, out.fails_in("forward"))
               if out.live(item[0])]
        step.committed = [item for item, _ in ran]
        sampled = {s.seq_id for s in step.sampling.seqs} if step.sampling is not None else set()
        wanted = [(seq, lg) for (seq, _), lg in ran
                  if lg is not None and (seq.seq_id in sampled or isinstance(seq, ScoringSequence))]
        return [(seq, res) for (seq, _), res in isolate(wanted, self.runner.sample, out.fails_in("sampling"))
                if out.live(seq)]

    def _fail_step(self, step: Launched, exc: Exception, out: StepOutcome) -> list:
        log.error("device step failed: %s: %s", type(exc).__name__, exc)
        for item in step.items:
            if out.live(item[0]):
                out.fail("device step", item, exc)
        return []

    def _settle_and_postprocess(self, step: Launched, results: list[tuple[Sequence, Any]], out: StepOutcome) -> None:
        starts = {seq.seq_id: (start, n) for (seq, n), start in zip(step.items, step.starts)}
        for seq, res in results:
            if isinstance(res, Scores):
                start, n = starts[seq.seq_id]
                res.done = start + n == len(seq.tokens)
                continue
            step.drawn[seq.seq_id] = res
            if res.accepted_draft is not None:
                self.speculation.settle(seq, res.accepted_draft)
        live = [(seq, res) for seq, res in results if out.live(seq)]

        def postprocess(batch: list[tuple[Sequence, Any]]) -> list[StreamEvent | None]:
            # A sibling sample's failure may have ended the request meanwhile.
            return [self.post.accept(seq, res) if out.live(seq) else None for seq, res in batch]

        for (seq, _), event in isolate(live, postprocess, out.fails_in("postprocess"), one_at_a_time=True):
            if event is not None:
                out.events.append((seq, event))


def _accepted(step: Launched, seq: Sequence) -> int | None:
    """How many of seq's draft tokens the step accepted (None: no verify, or not read yet)."""
    got = step.drawn.get(seq.seq_id)
    return got.accepted_draft if got is not None else None
