"""Engine: the facade. Loads the model, owns the engine loop thread, and takes requests.

The loop thread is the only owner of the scheduler, page pool and radix cache; other threads
talk to it through `submit` / `abort` (an inbox queue) and per-request handles.
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
from typing import Any, Iterator

import torch

from sgrun.engine.detokenizer import IncrementalDetokenizer
from sgrun.engine.model_runner import ModelRunner
from sgrun.engine.outputs import RequestOutput, StreamEvent, TokenLogprob
from sgrun.engine.page_pool import PagePool
from sgrun.engine.radix_cache import RadixCache
from sgrun.engine.request_handle import RequestHandle
from sgrun.engine.sampler import apply_logit_bias, apply_penalties, sample
from sgrun.engine.sampling_params import SamplingParams
from sgrun.engine.scheduler import Scheduler
from sgrun.engine.sequence import Sequence
from sgrun.errors import InvalidRequestError
from sgrun.models.llama import LlamaModel
from sgrun.models.loader import load_model_files, stored_quantization
from sgrun.models.quant_linear import QUANT_MODES

log = logging.getLogger("sgrun.engine")

# Jump-forward retokenises at most this many already generated tokens before the forced text.
JUMP_FORWARD_TAIL = 4
DEFAULT_KV_MEMORY_GB = 2.0


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if torch.cuda.is_available():
            return torch.bfloat16
        flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
        # bf16 matmuls are only fast with native instructions (AMX / AVX512-BF16).
        return torch.bfloat16 if ("amx_bf16" in flags or "avx512_bf16" in flags) else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise InvalidRequestError(f"dtype must be one of auto, {', '.join(table)}; got {dtype!r}", field="dtype")
    return table[dtype]


_LIVE_ENGINES: "weakref.WeakSet[Engine]" = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    # A daemon engine thread killed mid-op at interpreter exit aborts the process; stop it first.
    for engine in list(_LIVE_ENGINES):
        engine.close()


_MODELS: dict[tuple[str, torch.dtype, str], tuple[LlamaModel, Any, str]] = {}
_MODELS_LOCK = threading.Lock()


def _load(model: str | os.PathLike | None, dtype: torch.dtype, quantization: str):
    """Load (model, tokenizer, path) once per process: weights are read-only at inference, so
    several engines on the same file (tests, benchmarks comparing settings) share them.
    quantization "auto" follows the file (a Q4 GGUF stays int4, Q8 int8, f16/bf16/f32 dense)."""
    from sgrun.models.fetch import resolve_model_path
    if quantization not in ("auto", *QUANT_MODES):
        raise InvalidRequestError(f"quantization must be one of auto, {', '.join(QUANT_MODES)}; got {quantization!r}",
                                  field="quantization")
    path = str(resolve_model_path(model).resolve())
    if quantization == "auto":
        quantization = stored_quantization(path)
    key = (path, dtype, quantization)
    with _MODELS_LOCK:
        if key not in _MODELS:
            loaded = load_model_files(path, torch.float32)
            _MODELS[key] = (LlamaModel(loaded.config, loaded.weights, dtype, quantization), loaded.tokenizer, loaded.path)
        return _MODELS[key]


class Engine:
    def __init__(self, model: str | os.PathLike | None = None, *, dtype: str | torch.dtype = "auto",
                 num_threads: int | None = None, page_size: int = 16, max_pages: int | None = None,
                 memory_gb: float | None = None, max_running: int = 64, max_batch_tokens: int = 2048,
                 enable_prefix_cache: bool = True, cache_fraction: float | None = None,
                 max_context: int | None = None, debug_checks: bool = False, quantization: str = "auto"):
        if num_threads is not None:
            torch.set_num_threads(int(num_threads))
        self.dtype = resolve_dtype(dtype)
        self.model, self.tokenizer, self.model_path = _load(model, self.dtype, quantization)
        self.quantization = self.model.quantization
        self.config = cfg = self.model.cfg
        self.model_name = cfg.name
        if max_pages is None:
            per_page = PagePool.bytes_per_page(cfg.num_layers, page_size, cfg.num_kv_heads, cfg.head_dim, self.dtype)
            max_pages = max(4, int((memory_gb or DEFAULT_KV_MEMORY_GB) * (1 << 30) // per_page))
        self.pool = PagePool(cfg.num_layers, max_pages, page_size, cfg.num_kv_heads, cfg.head_dim, self.dtype)
        cap = int(max_pages * cache_fraction) if cache_fraction is not None else None
        self.cache = RadixCache(self.pool, cap) if enable_prefix_cache else None
        self.scheduler = Scheduler(self.pool, self.cache, max_running, max_batch_tokens)
        self.runner = ModelRunner(self.model, self.pool)
        self.max_context = min(cfg.max_position, max_pages * page_size, max_context or cfg.max_position)
        self.debug_checks = debug_checks
        self.num_steps = 0
        self.step_time_total = 0.0
        self.forward_time_total = 0.0
        self._seq_ids = itertools.count()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._handles: dict[str, RequestHandle] = {}
        self._stopping = False
        self._closed = False
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
               request_id: str | None = None, constraint: Any = None) -> RequestHandle:
        if self._closed:
            raise RuntimeError("engine is closed")
        params = (params or SamplingParams())
        if isinstance(params, dict):
            params = SamplingParams.from_dict(params)
        params.validated()
        prompt_ids = self._prompt_ids(prompt)
        if len(prompt_ids) + params.max_new_tokens > self.max_context:
            raise InvalidRequestError(
                f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({params.max_new_tokens}) exceeds the "
                f"context of {self.max_context} tokens: shorten the prompt or lower max_new_tokens",
                field="max_new_tokens" if len(prompt_ids) < self.max_context else "prompt")
        if constraint is None and params.has_constraint:
            constraint = self.compile_constraint(params)
        request_id = request_id or uuid.uuid4().hex
        handle = RequestHandle(self.abort, request_id, prompt_ids, params.n)
        for i in range(params.n):
            seq = self._new_seq(request_id, i, prompt_ids, params, handle.push)
            if constraint is not None:
                seq.matcher = constraint.matcher()
            if not params.greedy:
                seq.generator = torch.Generator()
                seq.generator.manual_seed(params.seed + i if params.seed is not None
                                          else int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))
            handle.seqs.append(seq)
        self._inbox.put(("add", handle))
        self._wake.set()
        return handle

    def compile_constraint(self, params: SamplingParams):
        from sgrun.constrain import compile_constraint
        tool_calls = None
        if params.tool_calls is not None:
            from sgrun.constrain.tool_calls import ToolCallConstraint
            tool_calls = ToolCallConstraint.from_dict(params.tool_calls)
        return compile_constraint(self.tokenizer, json_schema=params.json_schema, regex=params.regex,
                                  grammar=params.grammar, choices=params.choices, triggers=params.triggers,
                                  tool_calls=tool_calls, reasoning=params.reasoning)

    def abort(self, request_id: str) -> None:
        self._inbox.put(("abort", request_id))
        self._wake.set()

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
            if handle._finished < handle.n:
                handle.abort()

    def score(self, prompt: str | list[int], continuations: list[str | list[int]]) -> list[list[float]]:
        """Log-probability of each continuation token given the prompt (and the continuation's
        earlier tokens). The prompt is prefilled once and shared through the radix cache."""
        prompt_ids = self._prompt_ids(prompt)
        fulls, starts = [], []
        for c in continuations:
            if isinstance(c, str):
                full = self.tokenizer.encode(prompt + c, add_bos=False) if isinstance(prompt, str) \
                    else prompt_ids + self.tokenizer.encode(c, add_bos=False)
            else:
                full = prompt_ids + list(c)
            start = 0
            while start < min(len(full), len(prompt_ids)) and full[start] == prompt_ids[start]:
                start += 1
            fulls.append(full)
            starts.append(max(1, start))
        if any(len(f) > self.max_context for f in fulls):
            raise InvalidRequestError(f"prompt + continuation exceeds the context of {self.max_context} tokens",
                                      field="prompt")
        if self.cache is not None and len(continuations) > 1:
            # Prefill the shared prompt once so every continuation finds it in the cache.
            self._score_handle(prompt_ids, len(prompt_ids)).result()
        handles = [self._score_handle(f, s) for f, s in zip(fulls, starts)]
        return [h.result() and h.seqs[0].scores for h in handles]

    def _score_handle(self, ids: list[int], score_from: int) -> RequestHandle:
        handle = RequestHandle(self.abort, uuid.uuid4().hex, ids, 1)
        seq = self._new_seq(handle.request_id, 0, ids, SamplingParams(max_new_tokens=1), handle.push)
        seq.score_from = score_from
        seq.detok = None
        handle.seqs.append(seq)
        self._inbox.put(("add", handle))
        self._wake.set()
        return handle

    def stats(self) -> dict[str, Any]:
        sched, pool, cache = self.scheduler, self.pool, self.cache
        cached = cache.num_pages if cache else 0
        evictable = cache.num_evictable_pages if cache else 0
        prompt_total = sched.prompt_tokens_total
        return {
            "running": len(sched.running), "waiting": len(sched.waiting),
            "pages_total": pool.num_pages, "pages_free": pool.num_free,
            "pages_in_use": pool.num_pages - pool.num_free - evictable,
            "pages_cached": cached, "pages_evictable": evictable,
            "page_size": pool.page_size,
            "prompt_tokens_total": prompt_total, "cached_tokens_total": sched.cached_tokens_total,
            "cache_hit_rate": sched.cached_tokens_total / prompt_total if prompt_total else 0.0,
            "forward_calls": self.runner.forward_calls,
            "tokens_computed": self.runner.tokens_computed, "preemptions": sched.num_preemptions,
            "steps": self.num_steps,
        }

    def request_pages(self) -> int:
        """Pages held by requests (not only by the cache). Zero when nothing is running."""
        tree_pages: set[int] = set()
        if self.cache is not None:
            for node in self.cache.nodes():
                tree_pages.update(node.pages)
        return sum(1 for p, r in enumerate(self.pool.ref) if r > (1 if p in tree_pages else 0))

    def flush_cache(self) -> int:
        """Drop every unlocked cached prefix; returns the number of pages freed."""
        if self.cache is None:
            return 0
        done: queue.SimpleQueue = queue.SimpleQueue()
        self._inbox.put(("call", lambda: done.put(self.cache.flush())))
        self._wake.set()
        return done.get()

    def run_on_loop(self, fn):
        """Run fn() on the engine thread and return its result (for checks and tests)."""
        done: queue.SimpleQueue = queue.SimpleQueue()
        self._inbox.put(("call", lambda: done.put(fn())))
        self._wake.set()
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

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- helpers --------------------------------------------------------------------------
    def _prompt_ids(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt)
        elif isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
            ids = list(prompt)
            bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
            if bad:
                raise InvalidRequestError(f"token id {bad[0]} is outside the vocabulary (0..{self.config.vocab_size - 1})",
                                          field="prompt")
        else:
            raise InvalidRequestError("prompt must be a string or a list of token ids", field="prompt")
        if not ids:
            raise InvalidRequestError("prompt is empty", field="prompt")
        if len(ids) >= self.max_context:
            raise InvalidRequestError(f"prompt has {len(ids)} tokens; the context holds {self.max_context}: "
                                      f"shorten the prompt", field="prompt")
        return ids

    def _new_seq(self, request_id: str, index: int, prompt_ids: list[int], params: SamplingParams, emit) -> Sequence:
        detok = IncrementalDetokenizer(self.tokenizer, prompt_ids, params.skip_special_tokens, params.stop)
        return Sequence(seq_id=next(self._seq_ids), request_id=request_id, index=index, tokens=list(prompt_ids),
                        prompt_len=len(prompt_ids), params=params, detok=detok, emit=emit)

    # --- the loop -------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            self._drain_inbox()
            if self._stopping:
                self._abort_all("engine closed")
                return
            if not self.scheduler.has_work():
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            try:
                self.step()
            except Exception:  # noqa: BLE001 - one bad batch must not kill the engine
                log.error("engine step failed:\n%s", traceback.format_exc())
                self._abort_all("internal error in engine step: " + traceback.format_exc(limit=1).strip())

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
                    for seq in handle.seqs:
                        if not seq.is_finished:
                            self._finish(seq, "abort")
                            seq.emit(StreamEvent(seq.index, "", [], [], "abort"))
            elif kind == "call":
                payload()

    def _abort_all(self, why: str) -> None:
        for handle in list(self._handles.values()):
            for seq in handle.seqs:
                if not seq.is_finished:
                    seq.error = why
                    self._finish(seq, "abort")
                    seq.emit(StreamEvent(seq.index, "", [], [], "abort", error=why))

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.finish_reason = reason
        self.scheduler.finish(seq)
        handle = self._handles.get(seq.request_id)
        if handle is not None and all(s.is_finished for s in handle.seqs):
            handle.finish_time = time.monotonic()
            del self._handles[seq.request_id]

    def step(self) -> None:
        t0 = time.perf_counter()
        batch = self.scheduler.schedule()
        if not batch.items:
            if self.scheduler.waiting and not self.scheduler.running:
                # Nothing running and the head of the queue still does not fit: it never will.
                seq = self.scheduler.waiting[0]
                seq.error = "request does not fit in the KV pool"
                self._finish(seq, "abort")
                seq.emit(StreamEvent(seq.index, "", [], [], "abort", error=seq.error))
            return
        logit_rows: dict[int, list[int]] = {}
        for seq, n in batch.items:
            end = seq.num_computed + n
            if seq.score_from is not None:
                lo = max(seq.num_computed, seq.score_from - 1)
                hi = min(end, len(seq.tokens) - 1)
                logit_rows[seq.seq_id] = [p - seq.num_computed for p in range(lo, hi)]
            elif end == len(seq.tokens):
                logit_rows[seq.seq_id] = [n - 1]
        t1 = time.perf_counter()
        logits = self.runner.forward(batch, logit_rows)
        t2 = time.perf_counter()
        self._process(batch, logits, logit_rows)
        self.num_steps += 1
        self.forward_time_total += t2 - t1
        self.step_time_total += time.perf_counter() - t0
        if self.debug_checks:
            from sgrun.engine.consistency import check_consistency
            check_consistency(self)

    def _process(self, batch, logits: torch.Tensor, logit_rows: dict[int, list[int]]) -> None:
        row = 0
        to_sample: list[tuple[Sequence, int]] = []
        for seq, n in batch.items:
            rows = logit_rows.get(seq.seq_id, [])
            start = seq.num_computed
            seq.num_computed += n
            if seq.score_from is not None:
                if rows:
                    lp = torch.log_softmax(logits[row:row + len(rows)], dim=-1)
                    targets = torch.tensor([seq.tokens[start + r + 1] for r in rows])
                    seq.scores.extend(lp.gather(1, targets[:, None])[:, 0].tolist())
                row += len(rows)
                if seq.num_computed == len(seq.tokens):
                    self._finish(seq, "stop")
                    seq.emit(StreamEvent(0, "", [], [], "stop"))
                continue
            if rows:
                to_sample.append((seq, row))
                row += 1
            if self.cache is not None and seq.cache_inserted_len < seq.prompt_len:
                # Cache the prompt chunk by chunk, so requests sharing it can start from it
                # while this one is still prefilling.
                self.scheduler.insert_into_cache(seq, min(seq.num_computed, seq.prompt_len))
        if to_sample:
            self._sample_and_append(to_sample, logits)

    def _sample_and_append(self, items: list[tuple[Sequence, int]], logits: torch.Tensor) -> None:
        seqs = [s for s, _ in items]
        rows = logits[torch.tensor([r for _, r in items])]
        raw = rows.clone() if any(s.params.logprobs is not None for s in seqs) else None
        params = [s.params for s in seqs]
        apply_logit_bias(rows, params)
        apply_penalties(rows, params, [s.tokens[:s.prompt_len] for s in seqs], [s.output_ids for s in seqs])
        constrained = [i for i, s in enumerate(seqs) if s.matcher is not None]
        if constrained:
            self._mask_constrained(rows, seqs, constrained)
        for i, s in enumerate(seqs):
            if s.params.ignore_eos and s.matcher is None:
                rows[i, list(self.tokenizer.eos_token_ids)] = float("-inf")
        result = sample(rows, params, [s.generator for s in seqs], [s.params.logprobs for s in seqs], raw)
        now = time.monotonic()
        for i, seq in enumerate(seqs):
            if seq.error is not None:
                self._finish(seq, "abort")
                seq.emit(StreamEvent(seq.index, "", [], [], "abort", error=seq.error))
                continue
            try:
                self._append_token(seq, result.tokens[i], now,
                                   None if result.logprobs is None or seq.params.logprobs is None
                                   else (result.logprobs[i], result.top[i]))
            except Exception:  # noqa: BLE001 - isolate a failing request
                log.error("request %s failed:\n%s", seq.request_id, traceback.format_exc())
                seq.error = "internal error: " + traceback.format_exc(limit=1).strip()
                self._finish(seq, "abort")
                seq.emit(StreamEvent(seq.index, "", [], [], "abort", error=seq.error))

    def _mask_constrained(self, rows: torch.Tensor, seqs: list[Sequence], constrained: list[int]) -> None:
        from sgrun.constrain import apply_bitmask
        from sgrun.constrain.bitmask import allocate_bitmask
        bitmask = allocate_bitmask(rows.shape[0], rows.shape[1])   # all allowed; filled for constrained rows
        for i in constrained:
            try:
                seqs[i].matcher.fill_bitmask(bitmask[i])
            except Exception as exc:  # noqa: BLE001 - e.g. an automaton over its size cap: fail this request only
                seqs[i].error = f"constraint failed: {exc}"
                bitmask[i] = -1
        apply_bitmask(rows, bitmask, torch.tensor(constrained))     # in place, constrained rows only

    def _token_logprob(self, token: int, lp: float, top: list[tuple[int, float]]) -> TokenLogprob:
        dec = self.tokenizer.decode
        return TokenLogprob(token, dec([token]), lp, [(t, dec([t]), v) for t, v in top])

    def _append_token(self, seq: Sequence, token: int, now: float, logprob) -> None:
        if seq.first_token_time is None:
            seq.first_token_time = now
        p = seq.params
        new_tokens = [token]
        new_logprobs = [self._token_logprob(token, *logprob)] if logprob is not None else []
        seq.tokens.append(token)
        finish: str | None = None
        if seq.matcher is not None and not seq.matcher.advance(token):
            raise RuntimeError(f"constraint rejected sampled token {token}")
        if token in self.tokenizer.eos_token_ids and not p.ignore_eos:
            finish, seq.matched_stop = "stop", token
        elif token in p.stop_token_ids:
            finish, seq.matched_stop = "stop", token
        elif seq.matcher is not None and seq.matcher.is_terminated():
            finish = "stop"
        rebuilt = False
        if finish is None and seq.matcher is not None and p.jump_forward:
            jumped, rebuilt = self._jump_forward(seq)
            new_tokens = new_tokens[:len(new_tokens)] + jumped
            new_logprobs += [TokenLogprob(t, self.tokenizer.decode([t]), 0.0) for t in jumped] if logprob else []
            if seq.matcher.is_terminated():
                finish = "stop"
        if not rebuilt:
            seq.detok.update(seq.output_ids)
        if finish is None and (stop := seq.detok.find_stop()) is not None:
            finish, seq.matched_stop = "stop", stop
        if finish is None and (seq.num_output >= p.max_new_tokens or len(seq.tokens) >= self.max_context):
            finish = "length"
        seq.logprobs.extend(new_logprobs)
        delta = seq.detok.take_delta(final=finish is not None)
        if finish is not None:
            self._finish(seq, finish)
        seq.emit(StreamEvent(seq.index, delta, new_tokens, new_logprobs, finish, seq.matched_stop))

    def _jump_forward(self, seq: Sequence) -> tuple[list[int], bool]:
        """Append text the constraint forces, retokenising the last few tokens so the ids are
        the ones the tokenizer itself would produce. Returns (ids added, detokenizer rebuilt)."""
        forced = seq.matcher.forced_text()
        budget = seq.params.max_new_tokens - seq.num_output
        if not forced or budget <= 0:
            return [], False
        out = seq.output_ids
        tail = out[-min(len(out), JUMP_FORWARD_TAIL):]
        tail_text = self.tokenizer.decode(tail)
        if "\ufffd" in tail_text:
            tail, tail_text = [], ""
        new_ids = self.tokenizer.encode(tail_text + forced, add_bos=False)
        keep = 0
        while keep < min(len(tail), len(new_ids)) and tail[keep] == new_ids[keep]:
            keep += 1
        additions = new_ids[keep:][:budget + len(tail) - keep]
        roll = len(tail) - keep
        if not additions or len(additions) <= roll:
            return [], False
        seq.matcher.rollback(roll)
        removed = seq.tokens[len(seq.tokens) - roll:] if roll else []
        del seq.tokens[len(seq.tokens) - roll:]
        advanced = 0
        for t in additions:
            if not seq.matcher.advance(t):
                break
            advanced += 1
        if advanced < len(additions):
            # The retokenised text does not fit the automaton token by token: undo, no jump.
            seq.matcher.rollback(advanced)
            for t in removed:
                seq.matcher.advance(t)
            seq.tokens.extend(removed)
            return [], False
        seq.tokens.extend(additions)
        seq.num_computed = min(seq.num_computed, len(seq.tokens) - len(additions))
        seq.detok.rebuild(seq.output_ids)
        return additions, True
