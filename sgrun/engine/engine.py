"""Engine: the facade. Owns the engine loop thread and takes requests; what it runs (model,
KV pool, cache, scheduler, runner) is built from its options by engine_builder.py.

The loop thread is the only owner of the scheduler, page pool and radix cache; other threads
talk to it through `submit` / `abort` (an inbox queue) and per-request handles. One step is a
turn of the step pipeline (step.py): schedule (scheduler.py, which first settles what the
last turn computed and finished) -> run (model_runner.py) -> postprocess (postprocess.py), each
stage isolated per request (isolation.py). The pipeline reports back a StepOutcome; the engine closes
the requests that finished and ends alone a request whose input made a stage fail.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import traceback
import weakref
from collections import Counter
from typing import Any, Callable, Iterator, TypeVar

import torch

from sgrun.engine.stages.consistency import check_consistency
from sgrun.engine.engine_builder import EngineOptions, EngineParts, build_engine_parts, options_signature, options_with
from sgrun.engine.parts.intake import Intake
from sgrun.engine.state.outputs import RequestOutput, StreamEvent
from sgrun.engine.stages.postprocess import Postprocessor
from sgrun.engine.parts.request_constraint import compile_for_request, constraint_of, warm_constraint_index
from sgrun.engine.state.request_handle import RequestHandle
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.engine.state.scoring import scored_token_ids
from sgrun.engine.state.sequence import CompiledConstraint
from sgrun.engine.startup_report import startup_report
from sgrun.engine.stages.stats import engine_stats, request_pages
from sgrun.engine.pipeline.step import StepOutcome, StepPipeline
from sgrun.errors import EngineFatalError, InvalidRequestError

log = logging.getLogger("sgrun.engine")

_T = TypeVar("_T")
_LIVE_ENGINES: "weakref.WeakSet[Engine]" = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    # A daemon engine thread killed mid-op at interpreter exit aborts the process; stop it first.
    for engine in list(_LIVE_ENGINES):
        engine.close()


class Engine:
    """`Engine(model=None, options=None, **overrides)`: the keywords are EngineOptions' fields
    (engine_builder.py, docs/interfaces.md); `options` an EngineOptions to start from."""

    def __init__(self, model: str | os.PathLike | None = None, options: EngineOptions | None = None,
                 **overrides: Any):
        options = options_with(options, model, overrides)
        self._start(options, build_engine_parts(options))

    def _start(self, options: EngineOptions, parts: EngineParts) -> None:
        """Take over the built parts (engine_builder.py) and start the loop thread."""
        self.options, self.parts = options, parts
        self.post = Postprocessor(parts.tokenizer, parts.max_context)
        self.pipeline = StepPipeline(parts.scheduler, parts.runner, self.post, parts.speculation,
                                     parts.pipeline_depth, parts.device)
        self.aborted: Counter[str] = Counter()   # requests aborted, by cause (stats.ABORT_CAUSES)
        self.intake = Intake(parts.tokenizer, parts.config.vocab_size, parts.max_context, self.abort)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._handles: dict[str, RequestHandle] = {}
        self._stopping = False
        self._closed = False
        self.stopped_reason: str | None = None   # why the engine stopped on its own (EngineFatalError)
        self._thread = threading.Thread(target=self._loop, name="sgrun-engine", daemon=True)
        self._thread.start()
        _LIVE_ENGINES.add(self)
        # The constraint compiler's per-tokenizer tables, off the request path (request_constraint.py).
        threading.Thread(target=warm_constraint_index, args=(parts.tokenizer,), name="sgrun-vocab-index",
                         daemon=True).start()

    # The parts callers read (docs/interfaces.md); everything else is `engine.parts`.
    device = property(lambda self: self.parts.device)
    dtype = property(lambda self: self.parts.dtype)
    tokenizer = property(lambda self: self.parts.tokenizer)
    config = property(lambda self: self.parts.config)
    model_name = property(lambda self: self.parts.config.name)
    model_path = property(lambda self: self.parts.model_path)
    quantization = property(lambda self: self.parts.quantization)
    max_context = property(lambda self: self.parts.max_context)
    model = property(lambda self: self.parts.model)
    pool = property(lambda self: self.parts.pool)
    cache = property(lambda self: self.parts.cache)
    scheduler = property(lambda self: self.parts.scheduler)
    runner = property(lambda self: self.parts.runner)

    # --- public API -----------------------------------------------------------------------
    def submit(self, prompt: str | list[int], params: SamplingParams | None = None,
               request_id: str | None = None, constraint: CompiledConstraint | None = None) -> RequestHandle:
        if self._closed:
            raise RuntimeError(f"engine has stopped: {self.stopped_reason}" if self.stopped_reason
                               else "engine is closed")
        prompt_ids, params = self.intake.checked(prompt, params)
        if constraint is None and params.has_constraint:
            constraint = self.compile_constraint(params)
        return self._add(self.intake.request(prompt_ids, params, request_id, constraint))

    def compile_constraint(self, params: SamplingParams) -> CompiledConstraint:
        """The constraint `params` ask for, compiled as every request's is (request_constraint.py)."""
        return compile_for_request(self.tokenizer, **constraint_of(params))

    def abort(self, request_id: str) -> None:
        """Cancel a request (its caller went away): it ends with finish_reason "abort"."""
        self._post(("abort", request_id))

    def generate(self, prompts: str | list[int] | list[str | list[int]],
                 params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        plist = params if isinstance(params, list) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise InvalidRequestError("give one SamplingParams, or one per prompt", field="params")
        handles = [self.submit(p, sp) for p, sp in zip(prompts, plist)]
        return [h.result() for h in handles]

    def stream(self, prompt: str | list[int], params: SamplingParams | None = None) -> Iterator[str]:
        handle = self.submit(prompt, params)
        try:
            for ev in handle:
                if ev.text:
                    yield ev.text
        finally:
            if not handle.finished:
                handle.abort()

    def score(self, prompt: str | list[int], continuations: list[str | list[int]]) -> list[list[float]]:
        """Log-probability of each continuation token given the prompt (and the continuation's
        earlier tokens). The prompt is prefilled once and shared through the radix cache."""
        prompt_ids = self.intake.prompt_ids(prompt)
        requests = scored_token_ids(self.tokenizer, prompt, prompt_ids, continuations, self.max_context)
        if self.cache is not None and len(continuations) > 1:
            # Prefill the shared prompt once so every continuation finds it in the cache.
            self._add(self.intake.scoring(prompt_ids, len(prompt_ids))).result()
        handles = [self._add(self.intake.scoring(ids, start)) for ids, start in requests]
        outs = [h.result() for h in handles]
        for out in outs:
            if out.error is not None:
                raise RuntimeError(f"scoring failed: {out.error}")
        return [h.seqs[0].scores for h in handles]  # type: ignore[attr-defined]

    def stats(self) -> dict[str, Any]:
        """Counters and gauges for /metrics; the keys are listed in docs/interfaces.md."""
        p = self.parts
        return engine_stats(p.scheduler, p.pool, p.cache, p.runner, self.pipeline.num_steps, p.tp, p.model,
                            self.aborted, p.speculation.counters)

    def startup_report(self) -> dict[str, Any]:
        """Where the engine runs and what start-up measured (startup_report.py)."""
        return startup_report(self.parts)

    def request_pages(self) -> int:
        """Pages held by requests (not only by the cache). Zero when nothing is running."""
        return request_pages(self.pool, self.cache)

    def flush_cache(self) -> int:
        """Drop every unlocked cached prefix; returns the number of pages freed."""
        return self.run_on_loop(self.cache.flush) if self.cache is not None else 0

    def run_on_loop(self, fn: Callable[[], _T]) -> _T:
        """Run fn() on the engine thread and return its result (for checks and tests)."""
        done: queue.SimpleQueue = queue.SimpleQueue()
        self._post(("call", lambda: done.put(fn())))
        return done.get()

    def is_alive(self) -> bool:
        """True while the engine loop is running (for health checks)."""
        return self._thread.is_alive() and not self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=30)
        self._close_tensor_parallel()

    def _close_tensor_parallel(self) -> None:
        if self.parts.tp_group is not None:
            self.parts.tp_group.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _add(self, handle: RequestHandle) -> RequestHandle:
        self._post(("add", handle))
        return handle

    def _post(self, message: tuple[str, Any]) -> None:
        self._inbox.put(message)
        self._wake.set()

    # --- the loop -------------------------------------------------------------------------
    def _loop(self) -> None:
        if self.device.type == "cuda":   # a new thread starts on cuda:0; Triton launches on the current one
            torch.cuda.set_device(self.device)
        while True:
            self._drain_inbox()
            if self._stopping:
                self._take(self.pipeline.close())
                self._abort_all("engine closed")
                return
            if not self.scheduler.has_work() and not self.pipeline.busy:
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            try:
                self.step()
            except EngineFatalError as exc:   # e.g. a tensor-parallel rank died: stop, never hang
                log.error("engine stopped: %s", exc)
                self.stopped_reason = str(exc)
                self._closed = True
                self._abort_all(str(exc))
                self._close_tensor_parallel()
                return
            except Exception as exc:  # noqa: BLE001 - a bug outside the isolated stages: end all, keep the loop
                log.error("engine step failed:\n%s", traceback.format_exc())
                self._abort_all(f"internal error in engine step: {type(exc).__name__}: {exc}")

    def _drain_inbox(self) -> None:
        while True:
            try:
                kind, payload = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "add":
                self._handles[payload.request_id] = payload
                for seq in payload.seqs:
                    self.scheduler.add(seq)
            elif kind == "abort":
                handle = self._handles.get(payload)
                if handle is not None:
                    self._abort_request(handle, "client_disconnect")
            elif kind == "call":
                payload()

    def step(self) -> None:
        """One turn of the step pipeline (step.py: settle the last turn and schedule -> run ->
        postprocess), then what it reports back is applied."""
        self._take(self.pipeline.step())
        if self.options.debug_checks:
            check_consistency(self.scheduler, self.pool, self.cache)

    def _take(self, outcome: StepOutcome) -> None:
        """Close the requests a step finished; end those it failed, and one that never fits."""
        for seq in outcome.finished:
            self._close_if_done(seq.request_id)
        for request_id, error in outcome.failed.items():
            handle = self._handles.get(request_id)
            if handle is not None:
                self._abort_request(handle, "error", error)
        stuck = outcome.unschedulable
        if stuck is not None and stuck.request_id in self._handles:
            self._abort_request(self._handles[stuck.request_id], "engine", "request does not fit in the KV pool")

    # --- ending requests --------------------------------------------------------------------
    def _abort_request(self, handle: RequestHandle, cause: str, error: str | None = None) -> None:
        """End every unfinished sample of a request with finish_reason "abort" (and `error`, if
        any): its pages are freed and its stream gets its final event. Counted once per request."""
        live = [s for s in handle.seqs if not s.is_finished]
        if live:
            self.aborted[cause] += 1
        for seq in live:
            seq.output.error, seq.output.abort_cause, seq.output.finish_reason = error, cause, "abort"
            self.scheduler.finish(seq)
            seq.emit(StreamEvent(seq.index, "", [], [], "abort", error=error))
        self._close_if_done(handle.request_id)

    def _abort_all(self, why: str) -> None:
        for handle in list(self._handles.values()):
            self._abort_request(handle, "engine", why)

    def _close_if_done(self, request_id: str) -> None:
        handle = self._handles.get(request_id)
        if handle is not None and all(s.is_finished for s in handle.seqs):
            del self._handles[request_id]


Engine.__init__.__signature__ = options_signature()   # type: ignore[attr-defined]
