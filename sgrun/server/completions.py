"""/v1/completions: one or several prompts (text or token ids), echo, logprobs, streaming."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from sgrun.engine.outputs import TokenLogprob
from sgrun.errors import SgrunError
from sgrun.server.chat import engine_failure, usage
from sgrun.server.engine_bridge import RunningRequest, merged_events, submit
from sgrun.server.errors import APIError, bad_request, from_exception
from sgrun.server.openai_params import OPENAI_FIELD_NAMES, build_sampling_params, check_n, check_sequence_count
from sgrun.server.protocol import CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse
from sgrun.server.state import ServerState
from sgrun.server.streaming import DONE, sse, stream_failure

MAX_PROMPTS = 256


@dataclass
class PreparedPrompt:
    ids: list[int]
    text: str          # for echo


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


def prepare_prompts(state: ServerState, req: CompletionRequest) -> list[PreparedPrompt]:
    state.check_model(req.model)
    check_n(req.n)
    if req.suffix:
        raise bad_request("suffix (fill-in-the-middle) is not supported by this server; put all text in prompt",
                          param="suffix", code="unsupported_parameter")
    if req.best_of is not None and req.best_of != (req.n or 1):
        raise bad_request("best_of is not supported (only best_of == n)", param="best_of",
                          code="unsupported_parameter")
    prompts = split_prompts(req.prompt)
    if len(prompts) > MAX_PROMPTS:
        raise bad_request(f"at most {MAX_PROMPTS} prompts per request", param="prompt")
    tok = state.tokenizer
    out = []
    vocab = state.engine.config.vocab_size
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            if not p:
                raise bad_request("prompt must not be an empty string", param=f"prompt[{i}]" if len(prompts) > 1 else "prompt")
            out.append(PreparedPrompt(tok.encode(p), p))
        else:
            if not p:
                raise bad_request("a token-id prompt must not be empty", param="prompt")
            if any(not 0 <= t < vocab for t in p):
                raise bad_request(f"prompt token ids must be in [0, {vocab})", param="prompt")
            out.append(PreparedPrompt(p, tok.decode(p) if req.echo else ""))
    return out


def _completion_logprobs(items: list[TokenLogprob], top_n: int, start_offset: int) -> CompletionLogprobs:
    tokens, lps, tops, offsets = [], [], [], []
    offset = start_offset
    for t in items:
        tokens.append(t.token)
        lps.append(t.logprob)
        tops.append({tok: lp for _, tok, lp in t.top[:top_n]} if top_n else None)
        offsets.append(offset)
        offset += len(t.token)
    return CompletionLogprobs(tokens=tokens, token_logprobs=lps, top_logprobs=tops, text_offset=offsets)


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


async def start_completions(state: ServerState, req: CompletionRequest
                            ) -> tuple[list[PreparedPrompt], list[RunningRequest], str]:
    try:
        prompts = await asyncio.to_thread(prepare_prompts, state, req)
        if req.logprobs is not None and not 0 <= req.logprobs <= 20:
            raise bad_request(f"logprobs must be in [0, 20], got {req.logprobs}", param="logprobs")
        constraint = {}
        if sum(x is not None for x in (req.regex, req.ebnf, req.json_schema)) > 1:
            raise bad_request("give at most one of regex, ebnf and json_schema", param="regex")
        if req.regex is not None:
            constraint = {"regex": req.regex}
        elif req.ebnf is not None:
            constraint = {"grammar": req.ebnf}
        elif req.json_schema is not None:
            constraint = {"json_schema": req.json_schema}
        check_sequence_count(len(prompts), req.n or 1)
        params_list = [build_sampling_params(req, req.max_tokens if req.max_tokens is not None else 16,
                                             len(p.ids), state.max_context, req.logprobs,
                                             vocab_size=state.tokenizer.vocab_size, **constraint)
                       for p in prompts]
    except (APIError, SgrunError) as exc:
        err = from_exception(exc)
        raise err from exc
    rid = "cmpl-" + uuid.uuid4().hex
    constraint_param = next(iter(constraint), None)
    runs: list[RunningRequest] = []
    try:
        for i, (p, params) in enumerate(zip(prompts, params_list)):
            runs.append(await submit(state.engine, p.ids, params, state.metrics, "completion",
                                     request_id=f"{rid}-{i}", param_names=OPENAI_FIELD_NAMES,
                                     constraint_param={"grammar": "ebnf"}.get(constraint_param, constraint_param)))
    except BaseException:
        for r in runs:
            r.abort()
        raise
    return prompts, runs, rid


async def completion(state: ServerState, req: CompletionRequest, request: Request) -> CompletionResponse:
    prompts, runs, rid = await start_completions(state, req)
    try:
        results = await asyncio.gather(*(r.run_to_end(request) for r in runs))
    finally:
        for r in runs:
            r.abort()
    choices = []
    prompt_total = completion_total = cached_total = 0
    n = runs[0].params.n
    for pi, (p, run, samples) in enumerate(zip(prompts, runs, results)):
        if (err := engine_failure(samples)) is not None:
            raise err
        final = await run.final_output()
        prompt_total += run.prompt_tokens
        completion_total += run.completion_tokens
        cached_total += min(final.cached_tokens, run.prompt_tokens) if final else 0
        echo_lp = await _prompt_logprobs(state, p) if (req.echo and req.logprobs is not None) else None
        for s_i, s in enumerate(samples):
            text = (p.text if req.echo else "") + s.text
            lp = None
            if req.logprobs is not None:
                lp = _completion_logprobs(s.logprobs, req.logprobs, len(p.text) if req.echo else 0)
                if echo_lp is not None:
                    lp = CompletionLogprobs(tokens=echo_lp.tokens + lp.tokens,
                                            token_logprobs=echo_lp.token_logprobs + lp.token_logprobs,
                                            top_logprobs=echo_lp.top_logprobs + lp.top_logprobs,
                                            text_offset=echo_lp.text_offset + lp.text_offset)
            choices.append(CompletionChoice(index=pi * n + s_i, text=text, finish_reason=s.finish_reason, logprobs=lp))
    return CompletionResponse(id=rid, created=int(time.time()), model=req.model, choices=choices,
                              usage=usage(prompt_total, completion_total, cached_total))


async def completion_stream(state: ServerState, req: CompletionRequest, prompts: list[PreparedPrompt],
                            runs: list[RunningRequest], rid: str) -> AsyncIterator[bytes]:
    created = int(time.time())
    n = runs[0].params.n
    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(index: int, text: str, finish: str | None = None, logprobs: CompletionLogprobs | None = None) -> bytes:
        return sse(CompletionResponse(id=rid, created=created, model=req.model, choices=[
            CompletionChoice(index=index, text=text, finish_reason=finish, logprobs=logprobs)]))

    offsets = [len(p.text) if req.echo else 0 for p in prompts for _ in range(n)]
    try:
        if req.echo:
            for pi, p in enumerate(prompts):
                for s_i in range(n):
                    yield chunk(pi * n + s_i, p.text)
        async for pi, ev in merged_events(runs):
            if ev.error:
                yield stream_failure(state, ev.error)
                return
            index = pi * n + ev.index
            lp = None
            if req.logprobs is not None and ev.logprobs:
                lp = _completion_logprobs(ev.logprobs, req.logprobs, offsets[index])
            offsets[index] += len(ev.text)
            if ev.text or lp is not None or ev.finish_reason is not None:
                yield chunk(index, ev.text, ev.finish_reason, lp)
        if include_usage:
            finals = [await r.final_output() for r in runs]
            cached = sum(min(f.cached_tokens, r.prompt_tokens) for f, r in zip(finals, runs) if f)
            yield sse(CompletionResponse(id=rid, created=created, model=req.model, choices=[],
                                         usage=usage(sum(r.prompt_tokens for r in runs),
                                                     sum(r.completion_tokens for r in runs), cached)))
        yield DONE
    finally:
        for r in runs:
            r.abort()
