"""The native protocol (docs/native-api.md): /generate, /score, /model_info and helpers, for
the DSL's remote backend. Shaped like SGLang's /generate."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

from starlette.requests import Request

from sgrun.engine.outputs import StreamEvent, TokenLogprob
from sgrun.engine.sampling_params import SamplingParams
from sgrun.constrain.tool_calls import ToolCallConstraint
from sgrun.errors import ConstraintError, SgrunError
from sgrun.server.constraint_compile import ConstraintSpec, compile_request_constraint
from sgrun.server.engine_bridge import RunningRequest, merged_events, submit_all
from sgrun.server.errors import bad_request, from_exception
from sgrun.server.field_mapping import FieldNames, native_names, native_sampling_params
from sgrun.server.protocol import (GenerateMetaInfo, GenerateRequest, GenerateResult, GenerateStreamEvent,
                                   ModelInfo, ScoreRequest, ScoreResponse)
from sgrun.server.request_limits import check_prompt_count, check_prompt_ids, check_sequence_count
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
    for kind in ("json_schema", "regex", "grammar", "choices", "triggers", "tool_calls"):
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


async def start_generate(state: ServerState, req: GenerateRequest) -> tuple[list[RunningRequest], bool]:
    prompts, is_batch = generate_prompts(req)
    check_prompt_count(len(prompts), "text" if req.text is not None else "input_ids")
    names = native_names(req.sampling_params)
    if req.input_ids is not None:
        names = names.with_renames(prompt="input_ids")
    params = native_sampling_params(req.sampling_params, req.return_logprob, req.top_logprobs_num, names,
                                    state.tokenizer.vocab_size)
    check_sequence_count(len(prompts), params.n, names.client("n") or "n")
    rids = _rids(req, len(prompts))
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            check_prompt_ids(p, state.tokenizer.vocab_size, "input_ids")
    ids = await asyncio.to_thread(lambda: [state.tokenizer.encode(p) if isinstance(p, str) else p for p in prompts])
    constraint = await compile_request_constraint(state.tokenizer, _constraint_spec(params, names), state.metrics)
    # Each prompt gets its own params copy: the engine may normalise fields in place.
    runs = await submit_all(state.engine, ids, [params.replace() for _ in ids], constraint, state.metrics,
                            "generate", names, rids)
    return runs, is_batch or params.n > 1


def _lp_entries(items: list[TokenLogprob]) -> tuple[list[tuple[float, int, str]], list[list[tuple[float, int, str]]]]:
    return ([(t.logprob, t.token_id, t.token) for t in items],
            [[(lp, tid, tok) for tid, tok, lp in t.top] for t in items])


def _meta(run: RunningRequest, completion_tokens: int, cached: int, finish: str | None = None,
          matched: str | int | None = None, logprob_items: list[TokenLogprob] | None = None,
          latency: float | None = None) -> GenerateMetaInfo:
    meta = GenerateMetaInfo(id=run.request_id, prompt_tokens=run.prompt_tokens, completion_tokens=completion_tokens,
                            cached_tokens=cached, finish_reason=finish, matched_stop=matched, e2e_latency=latency)
    if logprob_items is not None:
        meta.output_token_logprobs, meta.output_top_logprobs = _lp_entries(logprob_items)
    return meta


async def generate(state: ServerState, req: GenerateRequest, request: Request) -> GenerateResult | list[GenerateResult]:
    runs, as_list = await start_generate(state, req)
    try:
        all_outputs = await asyncio.gather(*(r.run_to_end(request) for r in runs))
    finally:
        for r in runs:
            r.abort()
    results = []
    for run, outputs in zip(runs, all_outputs):
        run.raise_if_failed()
        latency = time.perf_counter() - run.arrival
        for out in outputs:
            results.append(GenerateResult(text=out.text, output_ids=out.token_ids, meta_info=_meta(
                run, len(out.token_ids), run.cached_tokens, out.finish_reason, out.matched_stop,
                out.logprobs if req.return_logprob else None, latency)))
    return results if as_list else results[0]


async def generate_stream(state: ServerState, req: GenerateRequest, runs: list[RunningRequest]) -> AsyncIterator[bytes]:
    n = runs[0].params.n
    counts = [0] * (len(runs) * n)
    try:
        async for pi, ev in merged_events(runs):
            if ev.error:
                yield stream_failure(state.metrics, ev.error, runs[pi].request_id)
                return
            run = runs[pi]
            index = pi * n + ev.index
            counts[index] += len(ev.token_ids)
            yield sse(_stream_event(run, index, ev, counts[index], req.return_logprob))
        yield DONE
    finally:
        for r in runs:
            r.abort()


def _stream_event(run: RunningRequest, index: int, ev: StreamEvent, completion_tokens: int,
                  return_logprob: bool) -> GenerateStreamEvent:
    done = ev.finish_reason is not None
    # cached_tokens is known once the request is admitted; report it at the end from the handle.
    cached = run.cached_tokens if done else 0
    meta = _meta(run, completion_tokens, cached, ev.finish_reason, ev.matched_stop if done else None,
                 ev.logprobs if return_logprob else None, time.perf_counter() - run.arrival if done else None)
    return GenerateStreamEvent(index=index, text=ev.text, output_ids=list(ev.token_ids), meta_info=meta)


async def score(state: ServerState, req: ScoreRequest) -> ScoreResponse:
    if (req.text is None) == (req.input_ids is None):
        raise bad_request("give exactly one of 'text' and 'input_ids' for the prompt", param="text")
    if not req.continuations:
        raise bad_request("continuations must not be empty", param="continuations")
    prompt: str | list[int] = req.text if req.text is not None else list(req.input_ids or [])
    try:
        prompt_ids = await asyncio.to_thread(
            lambda: state.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt)
        scores = await asyncio.to_thread(state.engine.score, prompt, list(req.continuations))
    except SgrunError as exc:
        raise from_exception(exc) from exc
    scores = [list(map(float, s)) for s in scores]
    return ScoreResponse(logprobs=scores, sum_logprobs=[sum(s) for s in scores], num_tokens=[len(s) for s in scores],
                         prompt_tokens=len(prompt_ids))


def model_info(state: ServerState) -> ModelInfo:
    tok = state.tokenizer
    tmpl = tok.chat_template
    return ModelInfo(model_name=state.model_name, model_path=state.model_file_name,
                     chat_template=tmpl.source if tmpl else None,
                     chat_template_accepts_tools=bool(tmpl and tmpl.accepts_tools),
                     eos_token_ids=sorted(tok.eos_token_ids), bos_token_id=tok.bos_token_id,
                     vocab_size=tok.vocab_size, max_context=state.max_context,
                     special_tokens=dict(tok.special_tokens), tokenizer_fingerprint=tok.fingerprint)
