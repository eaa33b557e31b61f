"""Engine: the facade. Owns the engine loop thread and takes requests; what it runs (model,
KV pool, cache, scheduler, runner) is built from its options by engine_builder.py.

The loop thread is the only owner of the scheduler, page pool and radix cache; other threads
talk to it through `submit` / `abort` (an inbox queue) and per-request handles. One step is
schedule (scheduler.py) -> run (model_runner.py) -> postprocess (postprocess.py), each stage
isolated per request (isolation.py): a request whose input makes a stage fail ends alone.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import queue
import threading
import time
import traceback
import uuid
import weakref
from collections import Counter
from typing import Any, Callable, Iterator, TypeVar

import torch

from sgrun.engine.detokenizer import IncrementalDetokenizer
from sgrun.engine.engine_builder import EngineOptions, EngineParts, build_engine_parts
from sgrun.engine.isolation import isolate
from sgrun.engine.model_runner import Logits, SampledTokens, Scores
from sgrun.engine.outputs import RequestOutput, StreamEvent
from sgrun.engine.overlap import OverlapScheduler
from sgrun.engine.postprocess import Postprocessor
from sgrun.engine.prompt_ids import prompt_token_ids
from sgrun.engine.request_handle import RequestHandle
from sgrun.engine.sampling_params import SamplingParams
from sgrun.engine.scoring import ScoringSequence, scored_token_ids
from sgrun.engine.speculative import settle_drafts
from sgrun.engine.sequence import CompiledConstraint, Sequence
from sgrun.engine.stats import engine_stats, request_pages
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
    def __init__(self, model: str | os.PathLike | None = None, *, dtype: str | torch.dtype = "auto",
                 num_threads: int | None = None, page_size: int = 16, max_pages: int | None = None,
                 memory_gb: float | None = None, max_running: int = 64, max_batch_tokens: int = 2048,
                 enable_prefix_cache: bool = True, cache_fraction: float | None = None,
                 max_context: int | None = None, debug_checks: bool = False, quantization: str = "auto",
                 device: str = "auto", attention_backend: str | None = None, mem_fraction: float | None = None,
                 cuda_graph: bool | None = None, overlap: bool | None = None, tp: int = 1, tp_timeout: float = 60.0,
                 speculative_ngram: bool = False, speculative_num_draft: int = 6, speculative_ngram_max: int = 3,
                 speculative_ngram_min: int = 2, cascade_attention: bool = True, compile: bool | None = None):
        options = EngineOptions(
            model=model, dtype=dtype, num_threads=num_threads, page_size=page_size, max_pages=max_pages,
            memory_gb=memory_gb, max_running=max_running, max_batch_tokens=max_batch_tokens,
            enable_prefix_cache=enable_prefix_cache, cache_fraction=cache_fraction, max_context=max_context,
            debug_checks=debug_checks, quantization=quantization, device=device, attention_backend=attention_backend,
            mem_fraction=mem_fraction, cuda_graph=cuda_graph, overlap=overlap, tp=tp, tp_timeout=tp_timeout,
            speculative_ngram=speculative_ngram, speculative_num_draft=speculative_num_draft,
            speculative_ngram_max=speculative_ngram_max, speculative_ngram_min=speculative_ngram_min,
            cascade_attention=cascade_attention, compile=compile)
        self._start(options, build_engine_parts(options))

    def _start(self, options: EngineOptions, parts: EngineParts) -> None:
        """Take over the built parts (engine_builder.py) and start the loop thread."""
        self.options = options
        self.device, self.dtype, self.tp, self.tp_group = parts.device, parts.dtype, parts.tp, parts.tp_group
        self.model, self.tokenizer, self.model_path = parts.model, parts.tokenizer, parts.model_path
        self.config, self.quantization, self.model_name = parts.config, parts.quantization, parts.config.name
        self.pool, self.pool_budget, self.cache = parts.pool, parts.pool_budget, parts.cache
        self.max_context, self.scheduler, self.runner = parts.max_context, parts.scheduler, parts.runner
        self.speculative, self.speculation = parts.speculative, parts.speculation
        self.compiled, self.compile_s, self.graph_report = parts.compiled, parts.compile_s, parts.graph_report
        self._overlap = OverlapScheduler(self) if parts.use_overlap else None
        self.post = Postprocessor(self.tokenizer, self.max_context, self._finish)
        self.debug_checks = options.debug_checks
        self.num_steps = 0
        self.step_time_total = 0.0
        self.forward_time_total = 0.0
        self.aborted: Counter[str] = Counter()   # requests aborted, by cause (stats.ABORT_CAUSES)
        self._seq_ids = itertools.count()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._handles: dict[str, RequestHandle] = {}
        self._stopping = False
        self._closed = False
        self.stopped_reason: str | None = None   # why the engine stopped on its own (EngineFatalError)
        self._thread = threading.Thread(target=self._loop, name="sgrun-engine", daemon=True)
        self._thread.start()
        _LIVE_ENGINES.add(self)
        # The constraint compiler's per-tokenizer index takes ~1 s to build: do it now, off the
        # request path, so the first constrained request does not pay for it.
        threading.Thread(target=self._warm_constraint_index, name="sgrun-vocab-index", daemon=True).start()

    def _warm_constraint_index(self) -> None:
        try:
            from sgrun.constrain.token_table import token_table
            from sgrun.constrain.vocab_index import vocab_index
            vocab_index(token_table(self.tokenizer))
        except Exception:  # noqa: BLE001 - only a warm-up; compile reports real errors later
            log.debug("vocabulary index warm-up failed:\n%s", traceback.format_exc())

    # --- public API -----------------------------------------------------------------------
    def submit(self, prompt: str | list[int], params: SamplingParams | None = None,
               request_id: str | None = None, constraint: CompiledConstraint | None = None) -> RequestHandle:
        if self._closed:
            raise RuntimeError(f"engine has stopped: {self.stopped_reason}" if self.stopped_reason
                               else "engine is closed")
        params = (params or SamplingParams())
        if isinstance(params, dict):
            params = SamplingParams.from_dict(params)
        params.validated(self.config.vocab_size)
        prompt_ids = self._prompt_ids(prompt)
        if len(prompt_ids) + params.max_new_tokens > self.max_context:
            raise InvalidRequestError(
                f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({params.max_new_tokens}) exceeds the "
                f"context of {self.max_context} tokens: shorten the prompt or lower max_new_tokens",
                field="max_new_tokens" if len(prompt_ids) < self.max_context else "prompt")
        if constraint is None and params.has_constraint:
            constraint = self.compile_constraint(params)
        # Refuses a constraint whose shortest output exceeds max_new_tokens; masks that close within it.
        new_matcher = None
        if constraint is not None:
            from sgrun.constrain.budget import budgeted_matcher
            new_matcher = budgeted_matcher(constraint, params.max_new_tokens)
        request_id = request_id or uuid.uuid4().hex
        handle = RequestHandle(self.abort, request_id, prompt_ids, params.n)
        for i in range(params.n):
            detok = IncrementalDetokenizer(self.tokenizer, prompt_ids, params.skip_special_tokens, params.stop)
            seq = Sequence(seq_id=next(self._seq_ids), request_id=request_id, index=i, tokens=list(prompt_ids),
                           prompt_len=len(prompt_ids), params=params, detok=detok, emit=handle.push)
            if new_matcher is not None:
                seq.matcher = new_matcher()
            if not params.greedy:   # counter-based noise: hash(sample_seed, step) (counter_rng.py)
                seed = params.sample_seed(i)
                seq.sample_seed = (seed if seed is not None else int.from_bytes(os.urandom(8), "little")) & ((1 << 63) - 1)
            handle.seqs.append(seq)
        self._post(("add", handle))
        return handle

    def compile_constraint(self, params: SamplingParams) -> CompiledConstraint:
        from sgrun.constrain import compile_constraint
        tool_calls = None
        if params.tool_calls is not None:
            from sgrun.constrain.tool_calls import ToolCallConstraint
            tool_calls = ToolCallConstraint.from_dict(params.tool_calls)
        return compile_constraint(self.tokenizer, json_schema=params.json_schema, regex=params.regex,
                                  grammar=params.grammar, choices=params.choices, triggers=params.triggers,
                                  tool_calls=tool_calls, reasoning=params.reasoning,
                                  structural_tag=params.structural_tag, isolate=True)

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
        prompt_ids = self._prompt_ids(prompt)
        requests = scored_token_ids(self.tokenizer, prompt, prompt_ids, continuations, self.max_context)
        if self.cache is not None and len(continuations) > 1:
            # Prefill the shared prompt once so every continuation finds it in the cache.
            self._submit_scoring(prompt_ids, len(prompt_ids)).result()
        handles = [self._submit_scoring(ids, start) for ids, start in requests]
        outs = [h.result() for h in handles]
        for out in outs:
            if out.error is not None:
                raise RuntimeError(f"scoring failed: {out.error}")
        return [h.seqs[0].scores for h in handles]  # type: ignore[attr-defined]

    def _submit_scoring(self, ids: list[int], score_from: int) -> RequestHandle:
        handle = RequestHandle(self.abort, uuid.uuid4().hex, ids, 1)
        handle.seqs.append(ScoringSequence(seq_id=next(self._seq_ids), request_id=handle.request_id, index=0,
                                           tokens=list(ids), prompt_len=len(ids), params=SamplingParams(max_new_tokens=1),
                                           detok=None, emit=handle.push, score_from=score_from))
        self._post(("add", handle))
        return handle

    def stats(self) -> dict[str, Any]:
        """Counters and gauges for /metrics; the keys are listed in docs/interfaces.md."""
        return engine_stats(self)

    def startup_report(self) -> dict[str, Any]:
        """Where the engine runs and what start-up measured (device.py)."""
        from sgrun.engine.device import startup_report
        return startup_report(self)

    def request_pages(self) -> int:
        """Pages held by requests (not only by the cache). Zero when nothing is running."""
        return request_pages(self.pool, self.cache)

    def flush_cache(self) -> int:
        """Drop every unlocked cached prefix; returns the number of pages freed."""
        if self.cache is None:
            return 0
        cache = self.cache
        return self.run_on_loop(cache.flush)

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
        if self.tp_group is not None:
            self.tp_group.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _prompt_ids(self, prompt: str | list[int]) -> list[int]:
        return prompt_token_ids(self.tokenizer, prompt, self.config.vocab_size, self.max_context)

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
                if self._overlap is not None:
                    self._overlap.close()
                self._abort_all("engine closed")
                return
            if not self.scheduler.has_work() and not (self._overlap is not None and self._overlap.busy):
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
        """One batch: schedule -> forward -> commit the computed tokens -> sample -> postprocess
        (or, with overlap scheduling, one turn of the pipeline in overlap.py)."""
        if self._overlap is not None:
            self._overlap.step()
            return
        batch = self.scheduler.schedule()
        if not batch.items:
            self.handle_empty_schedule()
            return
        self.run_batch(batch.items)

    def handle_empty_schedule(self) -> None:
        stuck = self.scheduler.unschedulable()
        if stuck is not None:
            self._abort_request(self._handles[stuck.request_id], "engine", "request does not fit in the KV pool")

    def run_batch(self, items: list[tuple[Sequence, int]]) -> None:
        t0 = t1 = time.perf_counter()
        ran = self._live(isolate(items, self.runner.forward, self._fail_in("forward")))
        t2 = time.perf_counter()
        self.scheduler.commit([item for item, _ in ran])
        wanted: list[tuple[Sequence, Logits]] = [(seq, lg) for (seq, _), lg in ran if lg is not None]
        sampled = [(seq, out) for (seq, _), out in self._live(isolate(wanted, self.runner.sample,
                                                                        self._fail_in("sampling")))]
        settle_drafts(sampled, self.scheduler, self.speculation, self.speculative.num_draft)   # before postprocess
        isolate(sampled, self._postprocess, self._fail_in("postprocess"), one_at_a_time=True)
        self.num_steps += 1
        self.forward_time_total += t2 - t1
        self.step_time_total += time.perf_counter() - t0
        if self.debug_checks:
            from sgrun.engine.consistency import check_consistency
            check_consistency(self)

    def _postprocess(self, items: list[tuple[Sequence, SampledTokens | Scores]]) -> list[None]:
        for seq, out in items:
            if not seq.is_finished:   # a sibling sample's failure may have ended the request
                self.post.accept(seq, out)
        return [None] * len(items)

    @staticmethod
    def _live(pairs: list[tuple[tuple[Sequence, Any], _T]]) -> list[tuple[tuple[Sequence, Any], _T]]:
        """Drop items whose request was failed meanwhile (a sibling sample failed)."""
        return [(item, r) for item, r in pairs if not item[0].is_finished]

    def _fail_in(self, stage: str) -> Callable[[tuple[Sequence, Any], Exception], None]:
        def fail(item: tuple[Sequence, Any], exc: Exception) -> None:
            seq = item[0]
            log.error("request %s failed in %s:\n%s", seq.request_id, stage,
                      "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            handle = self._handles.get(seq.request_id)
            if handle is not None:
                self._abort_request(handle, "error", f"{stage} failed: {type(exc).__name__}: {exc}"[:500])
        return fail

    # --- ending requests --------------------------------------------------------------------
    def _abort_request(self, handle: RequestHandle, cause: str, error: str | None = None) -> None:
        """End every unfinished sample of a request with finish_reason "abort" (and `error`, if
        any): its pages are freed and its stream gets its final event. Counted once per request."""
        live = [s for s in handle.seqs if not s.is_finished]
        if live:
            self.aborted[cause] += 1
        for seq in live:
            seq.error, seq.abort_cause = error, cause
            self._finish(seq, "abort")
            seq.emit(StreamEvent(seq.index, "", [], [], "abort", error=error))

    def _abort_all(self, why: str) -> None:
        for handle in list(self._handles.values()):
            self._abort_request(handle, "engine", why)

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.finish_reason = reason
        self.scheduler.finish(seq)
        handle = self._handles.get(seq.request_id)
        if handle is not None and all(s.is_finished for s in handle.seqs):
            handle.finish_time = time.monotonic()
            del self._handles[seq.request_id]
