"""/v1/chat/completions: messages -> prompt tokens (chat_prompt.py), OpenAI fields ->
SamplingParams and the request's constraint (compiled here and handed to the engine), and the
non-streamed response. The streamed response is chat_stream.py."""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from dataclasses import dataclass

from starlette.requests import Request

from sgrun.constrain import Constraint
from sgrun.constrain.tool_calls import ToolCallConstraint
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.server.chat_prompt import render_prompt
from sgrun.server.constraint_compile import ConstraintSpec, compile_request_constraint, structural_tag_of
from sgrun.server.engine_bridge import RunningRequest, submit
from sgrun.server.errors import bad_request
from sgrun.server.field_mapping import CHAT_NAMES, FieldNames, openai_sampling_params
from sgrun.server.openai_shapes import chat_logprobs, usage
from sgrun.server.protocol import ChatChoice, ChatCompletionRequest, ChatCompletionResponse, ResponseMessage
from sgrun.server.request_limits import resolve_max_tokens
from sgrun.server.state import ServerState
from sgrun.server.reasoning import ReasoningSplitter
from sgrun.server.tool_decision import answered_calls, decide, needs_decision
from sgrun.server.tool_format import call_constraint, response_calls
from sgrun.server.tool_plan import ToolPlan, plan_tools


@dataclass
class PreparedChat:
    """A validated chat request, ready to submit."""
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    plan: ToolPlan
    constraint: ConstraintSpec | None
    names: FieldNames
    reasoning: ReasoningSplitter | None = None    # a template for the request's outputs (copied per sample)


def constraint_spec(req: ChatCompletionRequest, plan: ToolPlan, state: ServerState,
                    reasoning: tuple[str, str] | None = None) -> ConstraintSpec | None:
    """The one constraint of a chat request: response_format, regex, ebnf, or the tool-call
    format when the model may call tools (OpenAI's semantics with response_format too: calls are
    held to the tools, a text answer to the schema). With a reasoning parser it starts after the
    reasoning section (`reasoning`: compile_constraint's tags for this prompt)."""
    given: list[ConstraintSpec] = []
    rf = req.response_format
    if rf is not None:
        if rf.type == "json_object":
            given.append(ConstraintSpec("json_schema", True, "response_format"))
        elif rf.type == "json_schema":
            if rf.json_schema is None:
                raise bad_request("response_format of type json_schema needs a 'json_schema' object",
                                  param="response_format.json_schema")
            schema = rf.json_schema.schema
            given.append(ConstraintSpec("json_schema", True if schema is None or schema is True else schema,
                                        "response_format.json_schema.schema"))
        elif rf.type == "structural_tag":
            given.append(ConstraintSpec("structural_tag", structural_tag_of(rf), "response_format"))
        elif rf.type != "text":
            raise bad_request(f"response_format type must be 'text', 'json_object', 'json_schema' or 'structural_tag', "
                              f"got {rf.type!r}", param="response_format.type")
    if req.regex is not None:
        given.append(ConstraintSpec("regex", req.regex, "regex"))
    if req.ebnf is not None:
        given.append(ConstraintSpec("grammar", req.ebnf, "ebnf"))
    if len(given) > 1:
        raise bad_request("give at most one of response_format (json), regex and ebnf; got "
                          f"{sorted(s.param.split('.')[0] for s in given)}", param=given[-1].param)
    if plan.expects_calls:
        if given and given[0].kind != "json_schema":
            raise bad_request(f"{given[0].param} cannot be combined with tools unless tool_choice is 'none' "
                              f"(response_format can)", param=given[0].param)
        answer = given[0].value if given else None
        return ConstraintSpec("tool_calls", call_constraint(state.tool_format, plan, answer), "tools",
                              reasoning=reasoning, tool_indices=tuple(plan.indices))
    if not given:
        if req.tools:  # tool_choice "none": the tools are in the prompt, but the answer never opens a call
            return ConstraintSpec("tool_calls", ToolCallConstraint(state.tool_format.name, (), "none"), "tool_choice",
                                  reasoning=reasoning)
        return None
    # response_format starts after the reasoning; sgrun's own regex / ebnf describe the whole
    # output (a client that wants reasoning under them writes the section into its pattern).
    return ConstraintSpec(given[0].kind, given[0].value, given[0].param,
                          reasoning=reasoning if given[0].kind == "json_schema" else None)


def prepare_chat(state: ServerState, req: ChatCompletionRequest) -> PreparedChat:
    """Everything that can reject a request before its constraint is compiled (runs on a worker
    thread: tokenising long prompts is not free)."""
    state.check_model(req.model)
    plan = plan_tools(req.tools, req.tool_choice, req.parallel_tool_calls)
    # Every tool is in the prompt whatever tool_choice says (as OpenAI does), so turns with
    # different tool_choice share their prefix in the cache.
    text = render_prompt(state.tokenizer, state.tool_format, req.messages, list(req.tools or []),
                         chat_template_kwargs=req.chat_template_kwargs)
    prompt_ids = state.tokenizer.encode(text, add_bos=None)
    if req.top_logprobs is not None and not req.logprobs:
        raise bad_request("top_logprobs requires logprobs to be true", param="top_logprobs")
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    splitter, tags = None, None
    if state.reasoning is not None and not text.rstrip().endswith(state.reasoning[1]):
        # A template that opens the section itself (a generation prompt ending in `<think>`)
        # starts the output inside it; one that closes it (Qwen3 under enable_thinking false
        # writes an empty `<think>\n\n</think>`) leaves none to split or to constrain around.
        in_prompt = text.rstrip().endswith(state.reasoning[0])
        splitter = ReasoningSplitter(*state.reasoning, in_prompt=in_prompt)
        tags = ("" if in_prompt else state.reasoning[0], state.reasoning[1])
    spec = constraint_spec(req, plan, state, tags)
    max_field = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    names = CHAT_NAMES.with_renames(max_new_tokens=max_field)
    max_tokens = resolve_max_tokens(req.max_completion_tokens if req.max_completion_tokens is not None
                                    else req.max_tokens, len(prompt_ids), state.max_context,
                                    max_tokens_field=max_field, prompt_field="messages")
    params = openai_sampling_params(req, max_tokens, logprobs, names, state.tokenizer.vocab_size,
                                    state.strict_budget)
    return PreparedChat("chatcmpl-" + uuid.uuid4().hex, prompt_ids, params, plan, spec, names, splitter)


async def start_chat(state: ServerState, req: ChatCompletionRequest) -> tuple[PreparedChat, RunningRequest]:
    prepared = await asyncio.to_thread(prepare_chat, state, req)
    answered = answered_calls(req.messages)
    if needs_decision(prepared.constraint, prepared.params, answered):   # tools + response_format after results
        prepared.constraint, prepared.params = await decide(
            state, prepared.prompt_ids, prepared.params, prepared.constraint, prepared.names, answered,
            "response_format.json_schema.schema")
    constraint: Constraint | None = await compile_request_constraint(state, prepared.constraint)
    run = await submit(state.engine, prepared.prompt_ids, prepared.params, constraint, state.metrics, "chat",
                       prepared.names, request_id=prepared.request_id)
    return prepared, run


def response_message(state: ServerState, prepared: PreparedChat, text: str) -> ResponseMessage:
    reasoning = None
    if prepared.reasoning is not None:
        reasoning, text = copy.copy(prepared.reasoning).split(text, final=True)
    content: str | None = text
    calls = None
    if prepared.plan.expects_calls:
        content, calls = response_calls(state.tool_format, text, prepared.plan)
    return ResponseMessage(role="assistant", content=content, tool_calls=calls, reasoning_content=reasoning or None)


async def chat_completion(state: ServerState, req: ChatCompletionRequest, request: Request) -> ChatCompletionResponse:
    prepared, run = await start_chat(state, req)
    outputs = await run.run_to_end(request)
    run.raise_if_failed()
    choices = []
    for out in outputs:
        message = response_message(state, prepared, out.text)
        calls = message.tool_calls
        logprobs = (chat_logprobs(state.tokenizer, out.logprobs or [], prepared.params.logprobs or 0)
                    if prepared.params.logprobs is not None else None)
        # A call cut by max_tokens stays a (partial) tool call, with finish_reason "length".
        finish = "tool_calls" if (out.finish_reason == "stop" and calls) else out.finish_reason
        choices.append(ChatChoice(index=out.index, message=message, finish_reason=finish, logprobs=logprobs))
    return ChatCompletionResponse(id=prepared.request_id, created=int(time.time()), model=req.model,
                                  choices=choices, usage=usage(run.prompt_tokens, run.completion_tokens,
                                                               run.cached_tokens))
