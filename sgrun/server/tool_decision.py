"""Call or answer after a tool result: with tools and a response_format (tool_choice "auto"), a
call the conversation has already made and answered is not made again; the request answers
under the response_format instead.

Why (measured on the default SmolLM2-135M, pydantic-ai's Agent with NativeOutput and one
tool_plain, which looped to its request limit of 50): held to "a call, or a JSON answer" from
its first token, the output can only open a call (`<tool_call>`) or the answer (`{`). Having
read the tool's result, the model wants to answer in words (first-token logprobs "Paris" -1.9,
"<" -1.9, "The" -2.8, "{" not in the top 3: no chat template shows a model a JSON answer), so masked to
the two the call wins, and greedy decoding writes the very call it made before, whose result it
has just read. The constraint turns "I want to answer" into "call again", every turn.

What. A repeated identical call (same tool, same arguments once parsed, with its result already
in the messages) is, in this mode, that funnel and not a wish for information the conversation
lacks: the request is decoded once under the combined constraint (a probe, not returned); if all
its calls repeat answered ones, the request runs under the answer schema alone, else it runs as
asked, with the probe's seed, so the same tokens come back. The prompt is in the prefix cache by
then; the probe costs one call's decode. Elsewhere repeats stay possible (tool_choice
"required", or tools without response_format): tools need not be idempotent (a clock, a die, a
queue), and OpenAI allows them.

Applies to one sample (n = 1) without a reasoning parser, after at least one answered call."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from sgrun.constrain.tool_calls import ToolCallConstraint
from sgrun.engine.state.sampling_params import MAX_SEED, SamplingParams
from sgrun.server.constraint_compile import ConstraintSpec, compile_request_constraint
from sgrun.server.errors import from_exception
from sgrun.server.field_mapping import FieldNames
from sgrun.server.protocol import ChatMessage
from sgrun.server.state import ServerState


def _canonical(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def answered_calls(messages: list[ChatMessage]) -> set[tuple[str, str]]:
    """(tool name, canonical arguments) of every assistant call whose result a `tool` message gives."""
    answered_ids = {m.tool_call_id for m in messages if m.role == "tool" and m.tool_call_id}
    return {(c.function.name, _canonical(c.function.arguments))
            for m in messages if m.role == "assistant" for c in (m.tool_calls or [])
            if c.id in answered_ids}


def needs_decision(spec: ConstraintSpec | None, params: SamplingParams, answered: set[tuple[str, str]]) -> bool:
    """A tool_calls constraint in auto mode with an answer schema, one sample, no reasoning, and
    calls already answered in the conversation."""
    return (bool(answered) and spec is not None and spec.kind == "tool_calls"
            and isinstance(spec.value, ToolCallConstraint) and spec.value.mode == "auto"
            and spec.value.answer_schema is not None and params.n == 1 and spec.reasoning is None)


async def decide(state: ServerState, prompt_ids: list[int], params: SamplingParams, spec: ConstraintSpec,
                 names: FieldNames, answered: set[tuple[str, str]], answer_param: str
                 ) -> tuple[ConstraintSpec, SamplingParams]:
    """The constraint and sampling settings the request runs under: the answer schema alone when
    the probe only repeats answered calls, else the request's own (with the probe's seed)."""
    tc: ToolCallConstraint = spec.value
    if not params.greedy and params.seed is None:   # the run after the probe must draw the same tokens
        params = params.replace(seed=int.from_bytes(os.urandom(8), "little") & MAX_SEED)
    constraint = await compile_request_constraint(state, spec)
    probe = params.replace(logprobs=None)
    try:
        handle = await asyncio.to_thread(state.engine.submit, prompt_ids, probe, None, constraint)
    except Exception as exc:
        raise from_exception(exc, names) from exc
    output = await asyncio.to_thread(handle.result)
    if output.error is not None:
        return spec, params          # the request itself meets (and reports) the same failure
    _, calls = state.tool_format.parse_calls(output.text, list(tc.tools))
    if calls and all((c.name, _canonical(c.arguments)) in answered for c in calls):
        return ConstraintSpec("json_schema", tc.answer_schema, answer_param), params
    return spec, params
