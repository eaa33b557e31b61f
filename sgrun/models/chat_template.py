"""Chat templates: the model's Jinja template rendered the way Hugging Face renders it."""

from __future__ import annotations

import json
from datetime import datetime
from functools import cached_property
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from sgrun.errors import InvalidRequestError


def _raise(message: str) -> None:
    raise InvalidRequestError(f"chat template: {message}", field="messages")


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


class ChatTemplate:
    def __init__(self, source: str, bos_token: str | None = None, eos_token: str | None = None):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self.source = source
        self.template = env.from_string(source)
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""

    @cached_property
    def accepts_tools(self) -> bool:
        """True when the template itself renders the `tools` it is given: found by rendering one
        (Phi-4-mini's names `tools` but reads only a system message's own `tools` text)."""
        if "tools" not in self.source:
            return False
        name = "sgrun_probe_tool"
        tool = {"type": "function", "function": {"name": name, "description": "d",
                                                 "parameters": {"type": "object", "properties": {}}}}
        try:
            return name in self.render([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                                       tools=[tool])
        except InvalidRequestError:
            return True   # it needs other messages to render; it names tools, so trust it

    @cached_property
    def renders_tool_turns(self) -> bool:
        """True when a `tool` message's content reaches the prompt. Some templates keep only the
        roles they know (Phi-3.5's drops `tool` turns without a word): found by rendering one."""
        marker = "sgrun-tool-result-marker"
        probe = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                 {"role": "tool", "content": marker}]
        try:
            return marker in self.render(probe, add_generation_prompt=True)
        except InvalidRequestError:
            return False

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
               tools: list[dict] | None = None, **kwargs: Any) -> str:
        try:
            return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                        tools=tools, bos_token=self.bos_token, eos_token=self.eos_token,
                                        **kwargs)
        except InvalidRequestError:
            raise
        except (jinja2.TemplateError, TypeError, KeyError) as exc:
            raise InvalidRequestError(f"chat template could not render these messages: {exc}",
                                      field="messages") from exc
