"""Overlap scheduling: the engine thread schedules and launches step N+1 while the device still
runs step N, and waits only for step N's sampled tokens (as SGLang's overlap scheduler does).

The device half of every step (forward, then bias/penalties/mask/sampling) runs on one worker
thread, in order, like kernels on one CUDA stream: on CUDA it only queues kernels, on the CPU it
computes while the engine thread works. One engine-thread turn:

  1. schedule step N+1; a sequence whose step-N token is still being sampled counts it as its
     next input (`Sequence.pending`); the forward reads that token on the device;
  2. launch N+1's forward;
  3. wait for step N's tokens and postprocess them (constraint advance, stops, jump-forward,
     streaming) — the device meanwhile runs N+1's forward;
  4. check N+1 against what postprocessing did: a sequence that step N finished, or whose
     tokens changed (jump-forward appended forced text or retokenised the tail), gets neither
     N+1's K/V committed nor its sample; it simply continues from its real state next turn;
  5. build N+1's constraint bitmasks on the CPU (the matchers now include step N's token) and
     launch N+1's sampling.

So every token is sampled from exactly the logits and masks the plain loop would use: outputs
equal the non-overlapped engine's (tests/test_engine_overlap.py). Pages freed in step 3 can be
handed out only by a later schedule, whose forward runs after N+1's on the same worker, so a
stale write never lands in another request's page. Scoring batches, which need logits on the
host (scoring, logprobs), drain the pipeline and run as a plain step. A device-side exception (a bug, not a user
input: those fail on the host) ends the requests of that step with the error.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from sgrun.engine.isolation import isolate
from sgrun.engine.model_runner import BatchInputs, SampleOutput, SamplingInputs
from sgrun.engine.scoring import ScoringSequence
from sgrun.engine.sequence import Sequence

if TYPE_CHECKING:
    from sgrun.engine.engine import Engine

log = logging.getLogger("sgrun.engine")


@dataclass
class _Step:
    items: list[tuple[Sequence, int]]
    inputs: BatchInputs
    starts: list[int]                    # each sequence's num_computed at launch
    known: list[list[int]]               # the tokens it computes (without a pending last one)
    forward: Future
    sampled: list[Sequence] = field(default_factory=list)
    sample: Future | None = None
    token_of: dict[int, int] = field(default_factory=dict)   # seq_id -> sampled token, once read


class OverlapScheduler:
    def __init__(self, engine: "Engine"):
        self.e = engine
        dev = engine.device
        # The worker launches kernels (Triton's on the thread's current device): put it on ours.
        init = (lambda: torch.cuda.set_device(dev)) if dev.type == "cuda" else None
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sgrun-device", initializer=init)
        self.inflight: _Step | None = None
        self.dropped = 0   # step results discarded because the step before finished or changed the sequence

    @property
    def busy(self) -> bool:
        return self.inflight is not None

    # --- the worker's jobs (device half only: nothing here reads a Sequence) ------------------
    def _forward_job(self, inputs: BatchInputs, prev_sample: Future | None) -> torch.Tensor:
        prev_tokens = prev_sample.result().tokens if prev_sample is not None else None
        return self.e.runner.run(inputs, prev_tokens)

    def _sample_job(self, forward: Future, rows: list[int], si: SamplingInputs) -> SampleOutput:
        logits = forward.result()
        index = torch.tensor(rows, dtype=torch.long).to(logits.device)
        return self.e.runner.run_sampling(si, logits.index_select(0, index))

    # --- the engine thread ----------------------------------------------------------------------
    def step(self) -> None:
        e = self.e
        prev = self.inflight
        batch = e.scheduler.schedule()
        items = batch.items
        if not items:
            self.drain()
            e.handle_empty_schedule()
            return
        if any(isinstance(seq, ScoringSequence) or seq.params.logprobs is not None for seq, _ in items):
            # Logits wanted on the host (scores; logprobs, incl. forced tokens' after a jump):
            # pending tokens land first, then a plain step of the same batch.
            self.drain()
            e.run_batch([(s, n) for s, n in items if not s.is_finished])
            return
        future = {s.seq_id: j for j, s in enumerate(prev.sampled)} if prev is not None else None
        inputs = e.runner.prepare(items, future)
        cur = _Step(items, inputs, [s.num_computed for s, _ in items],
                    [s.tokens[s.num_computed:s.num_computed + n] for s, n in items],
                    self.worker.submit(self._forward_job, inputs, prev.sample if prev is not None else None))
        if prev is not None:
            self._complete(prev)
        valid = self._commit(cur, prev)
        self._launch_sampling(cur, valid)
        self.inflight = cur
        e.num_steps += 1
        if e.debug_checks:
            from sgrun.engine.consistency import check_consistency
            check_consistency(e)

    def drain(self) -> None:
        """Finish the step in flight (its tokens postprocessed); the pipeline is then empty."""
        if self.inflight is not None:
            prev, self.inflight = self.inflight, None
            self._complete(prev)

    def close(self) -> None:
        self.drain()
        self.worker.shutdown(wait=True)

    def _complete(self, step: _Step) -> None:
        e = self.e
        if step.sample is None:
            try:
                step.forward.result()
            except Exception as exc:  # noqa: BLE001 - see the module docstring
                self._fail_step(step, exc)
            return
        try:
            out = step.sample.result()
            results = e.runner.finish_sampling(step.sampled, out)
        except Exception as exc:  # noqa: BLE001
            self._fail_step(step, exc)
            return
        for seq, res in zip(step.sampled, results):
            seq.pending = 0
            step.token_of[seq.seq_id] = res.tokens[0]
        live = [(seq, res) for seq, res in zip(step.sampled, results) if not seq.is_finished]
        isolate(live, e._postprocess, e._fail_in("postprocess"), one_at_a_time=True)

    def _fail_step(self, step: _Step, exc: Exception) -> None:
        log.error("device step failed: %s: %s", type(exc).__name__, exc)
        for seq in step.sampled:
            seq.pending = 0
        fail = self.e._fail_in("device step")
        for seq, n in step.items:
            if not seq.is_finished:
                fail((seq, n), exc)

    def _commit(self, cur: _Step, prev: _Step | None) -> list[bool]:
        """Which of cur's items still compute what the sequence really holds; commit those."""
        valid = []
        for (seq, n), start, known in zip(cur.items, cur.starts, cur.known):
            used = known
            if len(known) < n:   # its last input was prev's sample
                token = prev.token_of.get(seq.seq_id) if prev is not None else None
                used = known + [token] if token is not None else None
            valid.append(used is not None and not seq.is_finished and seq.num_computed == start
                         and seq.tokens[start:start + n] == used)
        self.dropped += valid.count(False)
        self.e.scheduler.commit([item for item, ok in zip(cur.items, valid) if ok])
        return valid

    def _launch_sampling(self, cur: _Step, valid: list[bool]) -> None:
        e = self.e
        rows: list[int] = []
        sampled: list[Sequence] = []
        row = 0
        for (seq, n), want, ok in zip(cur.items, cur.inputs.wanted, valid):
            if want is None:
                continue
            row += len(want)
            # Sample only when these logits predict the sequence's real next token.
            if ok and seq.num_computed == len(seq.tokens):
                sampled.append(seq)
                rows.append(row - 1)
        if not sampled:
            return
        try:
            si = e.runner.prepare_sampling(sampled)
        except Exception:  # noqa: BLE001 - a constraint failed on the host: fail whose it was, sample the rest
            pairs = isolate(list(zip(sampled, rows)), lambda b: [None] * len(e.runner.prepare_sampling([s for s, _ in b]).seqs),
                            e._fail_in("sampling"))
            pairs = [(s, r) for (s, r), _ in pairs if not s.is_finished]
            if not pairs:
                return
            sampled, rows = [s for s, _ in pairs], [r for _, r in pairs]
            si = e.runner.prepare_sampling(sampled)
        cur.sampled = sampled
        cur.sample = self.worker.submit(self._sample_job, cur.forward, rows, si)
        for seq in sampled:
            seq.pending = 1
