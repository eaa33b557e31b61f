"""/v1/completions: one or several prompts (text or token ids), echo, logprobs, streaming."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.server.constraint_compile import ConstraintSpec, compile_request_constraint
from sgrun.server.engine_bridge import RunningRequest, merged_events, submit_all
from sgrun.server.errors import bad_request
from sgrun.server.field_mapping import COMPLETION_NAMES, openai_sampling_params
from sgrun.server.openai_shapes import completion_logprobs, usage
from sgrun.server.protocol import CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse
from sgrun.server.request_limits import (check_prompt_count, check_prompt_ids, check_sequence_count,
                                         resolve_max_tokens)
from sgrun.server.sse import DONE, sse, stream_failure
from sgrun.server.state import ServerState

DEFAULT_MAX_TOKENS = 16


@dataclass
class PreparedPrompt:
    ids: list[int]
    text: str          # for echo


@dataclass
class PreparedCompletion:
    request_id: str
    prompts: list[PreparedPrompt]
    params: list[SamplingParams]   # one per prompt (their max_tokens default depends on the prompt)
    constraint: ConstraintSpec | None


def split_prompts(prompt: str | list[Any]) -> list[str | list[int]]:
    """OpenAI's prompt forms: "text", ["a", "b"], [1, 2, 3], [[1, 2], [3]]."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise bad_request("prompt must not be empty", param="prompt")
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    if all(isinstance(p, str) for p in prompt):
        return list(prompt)
    if all(isinstance(p, list) for p in prompt):
        return [list(p) for p in prompt]
    raise bad_request("prompt must be a string, a list of strings, a list of token ids or a list of such lists",
                      param="prompt")


def constraint_spec(req: CompletionRequest) -> ConstraintSpec | None:
    given = [ConstraintSpec(kind, value, param) for kind, value, param in
             (("regex", req.regex, "regex"), ("grammar", req.ebnf, "ebnf"), ("json_schema", req.json_schema, "json_schema"))
             if value is not None]
    if len(given) > 1:
        raise bad_request("give at most one of regex, ebnf and json_schema", param="regex")
    return given[0] if given else None


def prepare_completion(state: ServerState, req: CompletionRequest) -> PreparedCompletion:
    """Everything that can reject a request before its constraint is compiled (on a worker thread)."""
    state.check_model(req.model)
    if req.suffix:
        raise bad_request("suffix (fill-in-the-middle) is not supported by this server; put all text in prompt",
                          param="suffix", code="unsupported_parameter")
    if req.best_of is not None and req.best_of != (req.n or 1):
        raise bad_request("best_of is not supported (only best_of == n)", param="best_of",
                          code="unsupported_parameter")
    raw_prompts = split_prompts(req.prompt)
    check_prompt_count(len(raw_prompts), "prompt")
    tok = state.tokenizer
    prompts = []
    for i, p in enumerate(raw_prompts):
        param = f"prompt[{i}]" if len(raw_prompts) > 1 else "prompt"
        if isinstance(p, str):
            if not p:
                raise bad_request("prompt must not be an empty string", param=param)
            prompts.append(PreparedPrompt(tok.encode(p), p))
        else:
            ids = check_prompt_ids(p, tok.vocab_size, param)
            prompts.append(PreparedPrompt(ids, tok.decode(ids) if req.echo else ""))
    spec = constraint_spec(req)
    check_sequence_count(len(prompts), req.n or 1)
    max_tokens = req.max_tokens if req.max_tokens is not None else DEFAULT_MAX_TOKENS
    params = [openai_sampling_params(req, resolve_max_tokens(max_tokens, len(p.ids), state.max_context,
                                                             max_tokens_field="max_tokens", prompt_field="prompt"),
                                     req.logprobs, COMPLETION_NAMES, tok.vocab_size, state.strict_budget)
              for p in prompts]
    return PreparedCompletion("cmpl-" + uuid.uuid4().hex, prompts, params, spec)


async def start_completions(state: ServerState, req: CompletionRequest
                            ) -> tuple[PreparedCompletion, list[RunningRequest]]:
    prepared = await asyncio.to_thread(prepare_completion, state, req)
    constraint = await compile_request_constraint(state, prepared.constraint)
    rid = prepared.request_id
    runs = await submit_all(state.engine, [p.ids for p in prepared.prompts], prepared.params, constraint,
                            state.metrics, "completion", COMPLETION_NAMES,
                            [f"{rid}-{i}" for i in range(len(prepared.prompts))])
    return prepared, runs


async def _prompt_logprobs(state: ServerState, p: PreparedPrompt) -> CompletionLogprobs:
    """echo + logprobs: the prompt tokens' own logprobs (the first has none)."""
    tok = state.tokenizer
    scores = (await asyncio.to_thread(state.engine.score, p.ids[:1], [p.ids[1:]]))[0] if len(p.ids) > 1 else []
    tokens = [tok.decode([t]) for t in p.ids]
    offsets, o = [], 0
    for t in tokens:
        offsets.append(o)
        o += len(t)
    return CompletionLogprobs(tokens=tokens, token_logprobs=[None] + list(scores), top_logprobs=[None] * len(tokens),
                              text_offset=offsets)


async def completion(state: ServerState, req: CompletionRequest, request: Request) -> CompletionResponse:
    prepared, runs = await start_completions(state, req)
    try:
        results = await asyncio.gather(*(r.run_to_end(request) for r in runs))
    finally:
        for r in runs:
            r.abort()
    choices = []
    n = runs[0].params.n
    for pi, (p, run, outputs) in enumerate(zip(prepared.prompts, runs, results)):
        run.raise_if_failed()
        echo_lp = await _prompt_logprobs(state, p) if (req.echo and req.logprobs is not None) else None
        for out in outputs:
            text = (p.text if req.echo else "") + out.text
            lp = None
            if req.logprobs is not None:
                lp = completion_logprobs(out.logprobs or [], req.logprobs, len(p.text) if req.echo else 0)
                if echo_lp is not None:
                    lp = CompletionLogprobs(tokens=echo_lp.tokens + lp.tokens,
                                            token_logprobs=echo_lp.token_logprobs + lp.token_logprobs,
                                            top_logprobs=echo_lp.top_logprobs + lp.top_logprobs,
                                            text_offset=echo_lp.text_offset + lp.text_offset)
            choices.append(CompletionChoice(index=pi * n + out.index, text=text, finish_reason=out.finish_reason,
                                            logprobs=lp))
    return CompletionResponse(id=prepared.request_id, created=int(time.time()), model=req.model, choices=choices,
                              usage=_total_usage(runs))


def _total_usage(runs: list[RunningRequest]):
    return usage(sum(r.prompt_tokens for r in runs), sum(r.completion_tokens for r in runs),
                 sum(r.cached_tokens for r in runs))


async def completion_stream(state: ServerState, req: CompletionRequest, prepared: PreparedCompletion,
                            runs: list[RunningRequest]) -> AsyncIterator[bytes]:
    created = int(time.time())
    rid = prepared.request_id
    n = runs[0].params.n
    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(index: int, text: str, finish: str | None = None, logprobs: CompletionLogprobs | None = None) -> bytes:
        return sse(CompletionResponse(id=rid, created=created, model=req.model, choices=[
            CompletionChoice(index=index, text=text, finish_reason=finish, logprobs=logprobs)]))

    offsets = [len(p.text) if req.echo else 0 for p in prepared.prompts for _ in range(n)]
    try:
        if req.echo:
            for pi, p in enumerate(prepared.prompts):
                for s_i in range(n):
                    yield chunk(pi * n + s_i, p.text)
        async for pi, ev in merged_events(runs):
            if ev.error:
                yield stream_failure(state.metrics, ev.error, runs[pi].request_id)
                return
            index = pi * n + ev.index
            lp = None
            if req.logprobs is not None and ev.logprobs:
                lp = completion_logprobs(ev.logprobs, req.logprobs, offsets[index])
            offsets[index] += len(ev.text)
            if ev.text or lp is not None or ev.finish_reason is not None:
                yield chunk(index, ev.text, ev.finish_reason, lp)
        if include_usage:
            yield sse(CompletionResponse(id=rid, created=created, model=req.model, choices=[],
                                         usage=_total_usage(runs)))
        yield DONE
    finally:
        for r in runs:
            r.abort()
