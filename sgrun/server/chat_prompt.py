"""Chat messages -> prompt text: OpenAI messages checked and turned into the dicts a chat
template renders (tool calls and results written in the call format when the template cannot
render them), then the model's template applied. Shared by /v1/chat/completions and
/apply_chat_template."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sgrun.constrain.tool_calls import CallFormat, arguments_object
from sgrun.server.errors import bad_request
from sgrun.server.protocol import ChatMessage, ToolDef
from sgrun.server.tool_format import render_assistant_calls, tool_specs
from sgrun.server.tool_plan import tool_json

if TYPE_CHECKING:
    from sgrun.models.tokenizer import Tokenizer

_ROLES = {"system", "user", "assistant", "tool", "developer"}


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


def template_messages(messages: list[ChatMessage], tools: list[ToolDef], template_takes_tools: bool,
                      fmt: CallFormat, tool_turns_render: bool = True) -> list[dict[str, Any]]:
    """OpenAI messages -> the dicts a chat template renders. Tool calls and tool results are
    written in the call format when the template cannot render them itself; a result goes in a
    `user` turn when the template would drop a `tool` turn (`tool_turns_render` false)."""
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
                                                     "arguments": arguments_object(c.function.arguments)}}
                                       for c in calls]
                out.append(d)
            else:
                parts = ([text] if text else []) + ([render_assistant_calls(fmt, calls)] if calls else [])
                out.append({"role": "assistant", "content": "\n".join(parts)})
            continue
        if text is None:
            raise bad_request(f"a {m.role} message needs content", param=f"messages[{i}].content")
        if role == "tool" and not tool_turns_render:
            out.append({"role": "user", "content": fmt.render_result(text)})
            continue
        d = {"role": role, "content": text}
        if role == "tool":
            if not template_takes_tools:
                d["content"] = fmt.render_result(text)
            else:
                if m.tool_call_id:
                    d["tool_call_id"] = m.tool_call_id
                if m.name:
                    d["name"] = m.name
        elif m.name:
            d["name"] = m.name
        out.append(d)
    if tools and not template_takes_tools:
        block = fmt.tools_block(tool_specs(tools))
        if out[0]["role"] == "system":
            out[0] = dict(out[0], content=out[0]["content"] + "\n\n" + block)
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


# Variables the renderer sets itself: chat_template_kwargs may not replace them.
_RESERVED_TEMPLATE_VARS = frozenset({"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})


def template_kwargs(kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """A request's chat_template_kwargs, checked: extra variables the template may read (Qwen3's
    `enable_thinking`), never the ones the renderer sets."""
    kwargs = dict(kwargs or {})
    for key in kwargs:
        if not isinstance(key, str) or not key.isidentifier():
            raise bad_request(f"chat_template_kwargs keys must be identifiers, got {key!r}",
                              param="chat_template_kwargs")
        if key in _RESERVED_TEMPLATE_VARS:
            raise bad_request(f"chat_template_kwargs may not set {key!r}: it is the request's own field",
                              param=f"chat_template_kwargs.{key}")
    return kwargs


def render_prompt(tokenizer: Tokenizer, fmt: CallFormat, messages: list[ChatMessage], tools: list[ToolDef],
                  add_generation_prompt: bool = True, chat_template_kwargs: dict[str, Any] | None = None) -> str:
    template = tokenizer.chat_template
    if template is None:
        raise bad_request("this model has no chat template; use /v1/completions with a plain prompt",
                          param="messages")
    takes_tools = bool(template.accepts_tools)
    msgs = template_messages(messages, tools, takes_tools, fmt, bool(getattr(template, "renders_tool_turns", True)))
    return tokenizer.apply_chat_template(msgs, add_generation_prompt=add_generation_prompt,
                                         tools=[tool_json(t) for t in tools] if (tools and takes_tools) else None,
                                         **template_kwargs(chat_template_kwargs))
