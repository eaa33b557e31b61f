"""The native protocol (docs/native-api.md): /generate, /score, /model_info and helpers, for
the DSL's remote backend. Shaped like SGLang's /generate."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from sgrun.engine.state.outputs import StreamEvent, TokenLogprob
from sgrun.engine.state.prompt_logprobs import prompt_logprobs
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.constrain.tool_calls import ToolCallConstraint
from sgrun.errors import ConstraintError, SgrunError
from sgrun.server.constraint_compile import ConstraintSpec, compile_request_constraint
from sgrun.server.engine_bridge import RunningRequest, merged_events, submit_all
from sgrun.server.errors import bad_request, from_exception
from sgrun.server.field_mapping import FieldNames, native_names, native_sampling_params
from sgrun.server.protocol import (GenerateMetaInfo, GenerateRequest, GenerateResult, GenerateStreamEvent,
                                   LogprobEntry, ModelInfo, ScoreRequest, ScoreResponse)
from sgrun.server.request_limits import check_prompt_count, check_prompt_ids, check_sequence_count
from sgrun.server.sglang_compat import reported_model_path
from sgrun.server.sse import DONE, sse, stream_failure
from sgrun.server.state import ServerState


def generate_prompts(req: GenerateRequest) -> tuple[list[str | list[int]], bool]:
    """(prompts, is_batch) from `text` or `input_ids`."""
    if (req.text is None) == (req.input_ids is None):
        raise bad_request("give exactly one of 'text' and 'input_ids'", param="text")
    if req.text is not None:
        if isinstance(req.text, str):
            return [req.text], False
        if not req.text:
            raise bad_request("text must not be an empty list", param="text")
        return list(req.text), True
    ids = req.input_ids or []
    if not ids:
        raise bad_request("input_ids must not be empty", param="input_ids")
    if all(isinstance(t, int) for t in ids):
        return [list(ids)], False  # type: ignore[arg-type]
    if all(isinstance(t, list) for t in ids):
        return [list(t) for t in ids], True  # type: ignore[misc]
    raise bad_request("input_ids must be a list of token ids or a list of such lists", param="input_ids")


def _rids(req: GenerateRequest, count: int) -> list[str]:
    if req.rid is None:
        return ["gen-" + uuid.uuid4().hex for _ in range(count)]
    rids = [req.rid] if isinstance(req.rid, str) else list(req.rid)
    if len(rids) != count:
        raise bad_request(f"rid must hold one id per prompt ({count}), got {len(rids)}", param="rid")
    return rids


def _constraint_spec(params: SamplingParams, names: FieldNames) -> ConstraintSpec | None:
    for kind in ("json_schema", "regex", "grammar", "choices", "triggers", "tool_calls", "structural_tag"):
        value = getattr(params, kind)
        if value is not None and value is not False:
            param = names.client(kind) or kind
            if kind == "tool_calls":
                try:
                    value = ToolCallConstraint.from_dict(value)
                except ConstraintError as exc:
                    raise bad_request(str(exc), param=param) from exc
            reasoning = tuple(params.reasoning) if params.reasoning else None
            return ConstraintSpec(kind, value, param, reasoning=reasoning)
    return None


@dataclass
class GenerateJob:
    """A /generate request on its way: the engine runs, plus what SGLang's protocol adds."""
    runs: list[RunningRequest]
    as_list: bool
    prefill_only: bool                               # max_new_tokens 0: report the prompt, generate nothing
    input_logprobs: list[list[LogprobEntry] | None]  # per prompt, when logprob_start_len asked for them
    with_text: bool                                  # token texts in logprob entries


async def start_generate(state: ServerState, req: GenerateRequest) -> GenerateJob:
    prompts, is_batch = generate_prompts(req)
    check_prompt_count(len(prompts), "text" if req.text is not None else "input_ids")
    names = native_names(req.sampling_params)
    if req.input_ids is not None:
        names = names.with_renames(prompt="input_ids")
    raw = dict(req.sampling_params or {})
    # SGLang clients send max_new_tokens 0 to prefill (cache_prefix, select, fork): the request
    # runs for one token, which is dropped, so the prompt lands in the prefix cache.
    prefill_only = type(raw.get("max_new_tokens")) is int and raw["max_new_tokens"] == 0  # not False or 0.0
    if prefill_only:
        raw["max_new_tokens"] = 1
    params = native_sampling_params(raw, bool(req.return_logprob), req.top_logprobs_num or 0, names,
                                    state.tokenizer.vocab_size, state.strict_budget)
    check_sequence_count(len(prompts), params.n, names.client("n") or "n")
    rids = _rids(req, len(prompts))
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            check_prompt_ids(p, state.tokenizer.vocab_size, "input_ids")
    ids = await asyncio.to_thread(lambda: [state.tokenizer.encode(p) if isinstance(p, str) else p for p in prompts])
    with_text = req.return_text_in_logprobs is not False
    inputs = await _input_logprobs(state, req, ids, prefill_only, with_text)
    constraint = await compile_request_constraint(state, _constraint_spec(params, names))
    # Each prompt gets its own params copy: the engine may normalise fields in place.
    runs = await submit_all(state.engine, ids, [params.replace() for _ in ids], constraint, state.metrics,
                            "generate", names, rids)
    return GenerateJob(runs, is_batch or params.n > 1, prefill_only, inputs, with_text)


async def _input_logprobs(state: ServerState, req: GenerateRequest, ids: list[list[int]], prefill_only: bool,
                          with_text: bool) -> list[list[LogprobEntry] | None]:
    start = req.logprob_start_len
    if start is not None and start < 0:
        start = None                       # SGLang's -1: no prompt logprobs
    if start is None and prefill_only:
        start = 0                          # a prefill-only request asking for logprobs wants the prompt's
    if not req.return_logprob or start is None:
        return [None] * len(ids)
    for p in ids:
        if start > len(p):
            raise bad_request(f"logprob_start_len ({start}) is past the end of the prompt ({len(p)} tokens)",
                              param="logprob_start_len")
    decode = state.tokenizer.decode if with_text else None
    try:
        return [[tuple(e) for e in await asyncio.to_thread(prompt_logprobs, state.engine, p, start, decode)]
                for p in ids]
    except SgrunError as exc:
        raise from_exception(exc) from exc


def _lp_entries(items: list[TokenLogprob], with_text: bool) -> tuple[list[LogprobEntry], list[list[LogprobEntry]]]:
    return ([(t.logprob, t.token_id, t.token if with_text else None) for t in items],
            [[(lp, tid, tok if with_text else None) for tid, tok, lp in t.top] for t in items])


def _finish(reason: str | None, matched: str | int | None, params: SamplingParams,
            error: str | None = None) -> dict[str, Any] | None:
    """sgrun's finish reason in SGLang's shape."""
    if reason is None:
        return None
    if reason == "length":
        return {"type": "length", "length": params.max_new_tokens}
    if reason == "abort":
        return {"type": "abort", "message": error or "aborted"}
    return {"type": reason, "matched": matched}


def _meta(run: RunningRequest, job: GenerateJob, index: int, completion_tokens: int, cached: int,
          finish: str | None = None, matched: str | int | None = None,
          logprob_items: list[TokenLogprob] | None = None, latency: float | None = None) -> GenerateMetaInfo:
    params = run.params
    if job.prefill_only:
        completion_tokens, logprob_items = 0, [] if logprob_items is not None else None
        finish_dict = None if finish is None else {"type": "length", "length": 0}
    else:
        finish_dict = _finish(finish, matched, params, run.error)
    meta = GenerateMetaInfo(id=run.request_id, prompt_tokens=run.prompt_tokens, completion_tokens=completion_tokens,
                            cached_tokens=cached, finish_reason=finish_dict,
                            matched_stop=None if job.prefill_only else matched, e2e_latency=latency)
    if logprob_items is not None:
        meta.output_token_logprobs, meta.output_top_logprobs = _lp_entries(logprob_items, job.with_text)
        meta.input_token_logprobs = job.input_logprobs[index] or []
    return meta


async def generate(state: ServerState, req: GenerateRequest, request: Request) -> GenerateResult | list[GenerateResult]:
    job = await start_generate(state, req)
    try:
        all_outputs = await asyncio.gather(*(r.run_to_end(request) for r in job.runs))
    finally:
        for r in job.runs:
            r.abort()
    results = []
    for pi, (run, outputs) in enumerate(zip(job.runs, all_outputs)):
        run.raise_if_failed()
        latency = time.perf_counter() - run.arrival
        for out in outputs:
            meta = _meta(run, job, pi, len(out.token_ids), run.cached_tokens, out.finish_reason, out.matched_stop,
                         out.logprobs if req.return_logprob else None, latency)
            if job.prefill_only:
                results.append(GenerateResult(text="", output_ids=[], meta_info=meta))
            else:
                results.append(GenerateResult(text=out.text, output_ids=out.token_ids, meta_info=meta))
    return results if job.as_list else results[0]


async def generate_stream(state: ServerState, req: GenerateRequest, job: GenerateJob) -> AsyncIterator[bytes]:
    """SGLang's stream: every event carries the text and output ids so far (its client slices
    `text`), this event's logprobs and the running counts; sgrun's `delta` is the new text."""
    runs = job.runs
    n = runs[0].params.n
    texts = [""] * (len(runs) * n)
    ids: list[list[int]] = [[] for _ in texts]
    logprobs_so_far = [0] * len(texts)
    try:
        async for pi, ev in merged_events(runs):
            if ev.error:
                yield stream_failure(state.metrics, ev.error, runs[pi].request_id)
                return
            run = runs[pi]
            index = pi * n + ev.index
            if job.prefill_only:
                if ev.finish_reason is None:
                    continue
                ev = StreamEvent(ev.index, "", [], [], ev.finish_reason)
            texts[index] += ev.text
            ids[index] += ev.token_ids
            done = ev.finish_reason is not None
            # cached_tokens is known once the request is admitted; report it at the end from the handle.
            meta = _meta(run, job, pi, len(ids[index]), run.cached_tokens if done else 0, ev.finish_reason,
                         ev.matched_stop if done else None, ev.logprobs if req.return_logprob else None,
                         time.perf_counter() - run.arrival if done else None)
            if req.return_logprob:
                logprobs_so_far[index] += len(ev.logprobs)
                meta.output_token_logprobs_length = logprobs_so_far[index]
            yield sse(GenerateStreamEvent(index=index, text=texts[index], delta=ev.text, output_ids=list(ids[index]),
                                          meta_info=meta))
        yield DONE
    finally:
        for r in runs:
            r.abort()


async def score(state: ServerState, req: ScoreRequest) -> ScoreResponse:
    if (req.text is None) == (req.input_ids is None):
        raise bad_request("give exactly one of 'text' and 'input_ids' for the prompt", param="text")
    if not req.continuations:
        raise bad_request("continuations must not be empty", param="continuations")
    vocab = state.tokenizer.vocab_size
    check_prompt_count(len(req.continuations), "continuations")
    if req.input_ids is not None:
        check_prompt_ids(req.input_ids, vocab, "input_ids")
    for i, c in enumerate(req.continuations):
        if isinstance(c, list) and c:
            check_prompt_ids(c, vocab, f"continuations[{i}]")
    prompt: str | list[int] = req.text if req.text is not None else list(req.input_ids or [])
    names = FieldNames({"prompt": "text" if req.text is not None else "input_ids"})
    try:
        prompt_ids = await asyncio.to_thread(
            lambda: state.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt)
        scores = await asyncio.to_thread(state.engine.score, prompt, list(req.continuations))
    except SgrunError as exc:
        raise from_exception(exc, names) from exc
    scores = [list(map(float, s)) for s in scores]
    token_ids = await asyncio.to_thread(_scored_ids, state, prompt, list(req.continuations), scores)
    return ScoreResponse(logprobs=scores, sum_logprobs=[sum(s) for s in scores], num_tokens=[len(s) for s in scores],
                         prompt_tokens=len(prompt_ids), token_ids=token_ids,
                         tokens=[[state.tokenizer.decode([t]) for t in ids] for ids in token_ids])


def _scored_ids(state: ServerState, prompt: str | list[int], continuations: list[str | list[int]],
                scores: list[list[float]]) -> list[list[int]]:
    """The tokens each score is for: the last len(score) tokens of prompt + continuation, tokenized
    as Engine.score tokenizes them (text joined before tokenizing, ids appended)."""
    tok = state.tokenizer
    out = []
    for c, lps in zip(continuations, scores):
        if isinstance(c, list):
            full = c
        elif isinstance(prompt, str):
            full = tok.encode(prompt + c, add_bos=False)
        else:
            full = tok.encode(c, add_bos=False)
        out.append(list(full[len(full) - len(lps):]) if lps else [])
    return out


def model_info(state: ServerState) -> ModelInfo:
    tok = state.tokenizer
    tmpl = tok.chat_template
    return ModelInfo(model_name=state.model_name, model_path=reported_model_path(state),
                     chat_template=tmpl.source if tmpl else None,
                     chat_template_accepts_tools=bool(tmpl and tmpl.accepts_tools),
                     eos_token_ids=sorted(tok.eos_token_ids), bos_token_id=tok.bos_token_id,
                     vocab_size=tok.vocab_size, max_context=state.max_context,
                     special_tokens=dict(tok.special_tokens), tokenizer_fingerprint=tok.fingerprint)
