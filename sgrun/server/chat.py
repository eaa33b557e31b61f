"""/v1/chat/completions: messages -> prompt tokens (through the chat template, with tools),
OpenAI fields -> SamplingParams and constraint, and the non-streamed response."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from sgrun.engine.sampling_params import SamplingParams
from sgrun.engine.outputs import TokenLogprob
from sgrun.errors import SgrunError
from sgrun.server.engine_bridge import RunningRequest, SampleState, submit
from sgrun.server.errors import APIError, bad_request, from_exception, generation_failed
from sgrun.server.openai_params import OPENAI_FIELD_NAMES, build_sampling_params, check_n
from sgrun.server.protocol import (ChatChoice, ChatCompletionRequest, ChatCompletionResponse, ChatLogprobs,
                                   ChatMessage, ChatTokenLogprob, PromptTokensDetails, ResponseMessage,
                                   ToolDef, TopLogprob, Usage)
from sgrun.server.state import ServerState
from sgrun.server.tools import (ToolPlan, check_parameter_schemas, default_tools_block, parse_tool_calls, plan_tools, render_call,
                                tool_call_regex, tool_json)

_ROLES = {"system", "user", "assistant", "tool", "developer"}


@dataclass
class PreparedChat:
    """A validated chat request, ready to submit."""
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    plan: ToolPlan
    constraint_param: str | None    # the request field a constraint error points at


# --------------------------------------------------------------------------- rendering


def _content_text(msg: ChatMessage, i: int) -> str | None:
    if msg.content is None or isinstance(msg.content, str):
        return msg.content
    texts = []
    for j, part in enumerate(msg.content):
        if part.type != "text" or part.text is None:
            raise bad_request(f"content part type {part.type!r} is not supported; this model reads text only",
                              param=f"messages[{i}].content[{j}].type")
        texts.append(part.text)
    return "\n".join(texts)


def template_messages(messages: list[ChatMessage], tools: list[ToolDef], template_takes_tools: bool
                      ) -> list[dict[str, Any]]:
    """OpenAI messages -> the dicts a chat template renders. Tool calls and tool results are
    written in the call format when the template cannot render them itself."""
    if not messages:
        raise bad_request("messages must contain at least one message", param="messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if m.role not in _ROLES:
            raise bad_request(f"unknown role {m.role!r}; use system, user, assistant or tool",
                              param=f"messages[{i}].role")
        role = "system" if m.role == "developer" else m.role
        text = _content_text(m, i)
        if role == "assistant":
            calls = m.tool_calls or []
            if text is None and not calls:
                raise bad_request("an assistant message needs content or tool_calls", param=f"messages[{i}].content")
            if template_takes_tools:
                d: dict[str, Any] = {"role": "assistant", "content": text or ""}
                if calls:
                    d["tool_calls"] = [{"id": c.id, "type": "function",
                                        "function": {"name": c.function.name,
                                                     "arguments": _loads_or_raw(c.function.arguments)}}
                                       for c in calls]
                out.append(d)
            else:
                parts = ([text] if text else []) + [render_call(c.function.name, c.function.arguments) for c in calls]
                out.append({"role": "assistant", "content": "\n".join(parts)})
            continue
        if text is None:
            raise bad_request(f"a {m.role} message needs content", param=f"messages[{i}].content")
        d = {"role": role, "content": text}
        if role == "tool":
            if template_takes_tools:
                if m.tool_call_id:
                    d["tool_call_id"] = m.tool_call_id
                if m.name:
                    d["name"] = m.name
        elif m.name:
            d["name"] = m.name
        out.append(d)
    if tools and not template_takes_tools:
        block = default_tools_block(tools)
        if out[0]["role"] == "system":
            out[0] = dict(out[0], content=out[0]["content"] + "\n\n" + block)
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def _loads_or_raw(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def render_prompt(tokenizer: Any, messages: list[ChatMessage], tools: list[ToolDef],
                  add_generation_prompt: bool = True) -> str:
    template = tokenizer.chat_template
    if template is None:
        raise bad_request("this model has no chat template; use /v1/completions with a plain prompt",
                          param="messages")
    takes_tools = bool(template.accepts_tools)
    msgs = template_messages(messages, tools, takes_tools)
    return tokenizer.apply_chat_template(msgs, add_generation_prompt=add_generation_prompt,
                                         tools=[tool_json(t) for t in tools] if (tools and takes_tools) else None)


# --------------------------------------------------------------------------- preparation


def _constraint_fields(req: ChatCompletionRequest, plan: ToolPlan, state_tokenizer: Any) -> dict[str, Any]:
    given: dict[str, Any] = {}
    param = "response_format"
    rf = req.response_format
    if rf is not None:
        if rf.type == "json_object":
            given["json_schema"] = True
        elif rf.type == "json_schema":
            if rf.json_schema is None:
                raise bad_request("response_format of type json_schema needs a 'json_schema' object",
                                  param="response_format.json_schema")
            schema = rf.json_schema.schema
            given["json_schema"] = True if schema is None or schema is True else schema
            param = "response_format.json_schema.schema"
        elif rf.type != "text":
            raise bad_request(f"response_format type must be 'text', 'json_object' or 'json_schema', got {rf.type!r}",
                              param="response_format.type")
    if req.regex is not None:
        given["regex"] = req.regex
        param = "regex"
    if req.ebnf is not None:
        given["grammar"] = req.ebnf
        param = "ebnf"
    if len(given) > 1:
        raise bad_request(f"give at most one of response_format (json), regex and ebnf; got {sorted(given)}",
                          param=param)
    if plan.expects_calls:
        if given:
            raise bad_request("response_format, regex and ebnf cannot be combined with tools unless "
                              "tool_choice is 'none'", param="tool_choice")
        check_parameter_schemas(state_tokenizer, plan.tools)
        given["regex"] = tool_call_regex(plan)
        param = "tools"
    given["_param"] = param
    return given


def prepare_chat(state: ServerState, req: ChatCompletionRequest) -> PreparedChat:
    """Everything that can reject a request before it reaches the engine (runs on a worker thread:
    tokenising long prompts is not free)."""
    state.check_model(req.model)
    check_n(req.n)
    plan = plan_tools(req.tools, req.tool_choice, req.parallel_tool_calls)
    text = render_prompt(state.tokenizer, req.messages, plan.tools)
    prompt_ids = state.tokenizer.encode(text, add_bos=None)
    if req.top_logprobs is not None and not req.logprobs:
        raise bad_request("top_logprobs requires logprobs to be true", param="top_logprobs")
    if req.top_logprobs is not None and not 0 <= req.top_logprobs <= 20:
        raise bad_request(f"top_logprobs must be in [0, 20], got {req.top_logprobs}", param="top_logprobs")
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    constraint = _constraint_fields(req, plan, state.tokenizer)
    max_field = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    param = constraint.pop("_param")
    try:
        params = build_sampling_params(req, max_tokens, len(prompt_ids), state.max_context, logprobs,
                                       max_tokens_field=max_field, vocab_size=state.tokenizer.vocab_size,
                                       **constraint)
    except APIError as err:
        if err.param in ("response_format", "regex", "ebnf"):
            err.param = param
        raise
    return PreparedChat("chatcmpl-" + uuid.uuid4().hex, prompt_ids, params, plan,
                        param if params.has_constraint else None)


async def start_chat(state: ServerState, req: ChatCompletionRequest) -> tuple[PreparedChat, RunningRequest]:
    try:
        prepared = await asyncio.to_thread(prepare_chat, state, req)
    except (APIError, SgrunError) as exc:
        err = from_exception(exc)
        raise err from exc
    run = await submit(state.engine, prepared.prompt_ids, prepared.params, state.metrics, "chat",
                       request_id=prepared.request_id, param_names=OPENAI_FIELD_NAMES,
                       constraint_param=prepared.constraint_param)
    return prepared, run


# --------------------------------------------------------------------------- responses


def token_bytes(tokenizer: Any, token_id: int, text: str) -> list[int]:
    tb = tokenizer.token_bytes
    raw = tb[token_id] if 0 <= token_id < len(tb) and tb[token_id] else text.encode("utf-8")
    return list(raw)


def chat_logprobs(tokenizer: Any, items: list[TokenLogprob], top_n: int) -> ChatLogprobs:
    return ChatLogprobs(content=[
        ChatTokenLogprob(token=t.token, logprob=t.logprob, bytes=token_bytes(tokenizer, t.token_id, t.token),
                         top_logprobs=[TopLogprob(token=tok, logprob=lp, bytes=token_bytes(tokenizer, tid, tok))
                                       for tid, tok, lp in t.top[:top_n]])
        for t in items])


def finish_reason(sample: SampleState, has_calls: bool) -> str | None:
    if sample.finish_reason == "stop" and has_calls:
        return "tool_calls"
    return sample.finish_reason


def engine_failure(samples: list[SampleState]) -> APIError | None:
    for s in samples:
        if s.error:
            return generation_failed(s.error)
    return None


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> Usage:
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                 total_tokens=prompt_tokens + completion_tokens,
                 prompt_tokens_details=PromptTokensDetails(cached_tokens=min(cached_tokens, prompt_tokens)))


async def chat_completion(state: ServerState, req: ChatCompletionRequest, request: Request) -> ChatCompletionResponse:
    prepared, run = await start_chat(state, req)
    samples = await run.run_to_end(request)
    if (err := engine_failure(samples)) is not None:
        raise err
    final = await run.final_output()
    choices = []
    for i, s in enumerate(samples):
        calls = parse_tool_calls(s.text) if prepared.plan.expects_calls else None
        message = ResponseMessage(role="assistant", content=None if calls else s.text, tool_calls=calls)
        logprobs = (chat_logprobs(state.tokenizer, s.logprobs, prepared.params.logprobs or 0)
                    if prepared.params.logprobs is not None else None)
        choices.append(ChatChoice(index=i, message=message, finish_reason=finish_reason(s, bool(calls)),
                                  logprobs=logprobs))
    cached = final.cached_tokens if final is not None else 0
    return ChatCompletionResponse(id=prepared.request_id, created=int(time.time()), model=req.model,
                                  choices=choices, usage=usage(run.prompt_tokens, run.completion_tokens, cached))
