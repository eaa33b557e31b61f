"""The interface every tool-call format implements (its four parts: prompting, constraint,
parsing, re-rendering), and the parsing steps they share."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from sgrun.constrain.regex_ast import Node
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments
from sgrun.constrain.tool_calls.tool_spec import CallsParse, ParsedCall, PartialCall, ToolSpec


class CallFormat(ABC):
    name: str
    opener: str                       # the text that starts the calls: the trigger in auto mode
    anchored: bool = False            # the opener counts only at the start of the output
    template_markers: tuple[str, ...] = ()   # text in a chat template that identifies this family

    # --- prompting ----------------------------------------------------------------------
    @abstractmethod
    def tools_block(self, tools: list[ToolSpec]) -> str:
        """System-prompt text listing the tools and saying how to call them (for chat templates
        that do not render tools themselves)."""

    # --- constraint ---------------------------------------------------------------------
    @abstractmethod
    def calls_after_opener(self, tools: list[ToolArguments], parallel: bool) -> Node:
        """The language of the output after `opener`: one call (or several when parallel)."""

    # --- parsing ------------------------------------------------------------------------
    @abstractmethod
    def parse_section(self, section: str, tools: dict[str, ToolSpec]) -> list[PartialCall]:
        """Calls in `section` (the text from just after the opener), the last possibly incomplete."""

    def find_opener(self, text: str) -> int:
        """Index where the calls start in `text`, or -1."""
        if self.anchored:
            stripped = len(text) - len(text.lstrip())
            return stripped if text[stripped:].startswith(self.opener) else -1
        return text.find(self.opener)

    def parse(self, text: str, tools: list[ToolSpec] | dict[str, ToolSpec] | None = None,
              final: bool = True) -> CallsParse:
        """Split an output into content and calls. With final=False (streaming) a tail that may
        still grow into the opener is held back rather than reported as content."""
        by_name = tools if isinstance(tools, dict) else {t.name: t for t in (tools or [])}
        i = self.find_opener(text)
        if i < 0:
            held = "" if final else self._possible_opener_tail(text)
            return CallsParse(content=text[:len(text) - len(held)], calls=[], held=held)
        calls = self.parse_section(text[i + len(self.opener):], by_name)
        return CallsParse(content=text[:i], calls=calls)

    def _possible_opener_tail(self, text: str) -> str:
        if self.anchored:
            head = text.lstrip()
            return text if self.opener.startswith(head) else ""
        for k in range(min(len(self.opener) - 1, len(text)), 0, -1):
            if self.opener.startswith(text[-k:]):
                return text[-k:]
        return ""

    def parse_calls(self, text: str, tools: list[ToolSpec] | None = None) -> tuple[str | None, list[ParsedCall]]:
        """Whole parse of a finished output: (content or None, calls). A call cut short (the
        output was truncated) is kept with its partial arguments and complete=False."""
        got = self.parse(text, tools, final=True)
        calls = [ParsedCall(c.name, c.arguments, c.complete) for c in got.calls if c.name is not None]
        content = got.content if (got.content.strip() or not calls) else None
        if calls and content is not None:
            content = content.rstrip()
        return content, calls

    # --- re-rendering ---------------------------------------------------------------------
    @abstractmethod
    def render(self, calls: list[tuple[str, Any]]) -> str:
        """The assistant text carrying these (name, arguments value) calls, as the constraint lets
        the model write them and in the spacing it writes (json.dumps' for JSON formats), so a
        returned turn re-tokenises to the tokens the model produced and the prefix cache matches."""

    def render_result(self, content: str) -> str:
        """A tool result's text in its `tool` turn, for chat templates that cannot render tool
        turns themselves: as the family's models were shown results (plain text unless the
        format has a markup for them)."""
        return content


# --- shared scanning ------------------------------------------------------------------------

def json_value_end(text: str, start: int) -> int | None:
    """End index of the JSON value beginning at text[start] (after whitespace), or None while
    it is incomplete. Strings, nesting and escapes are tracked; scalars end at a delimiter."""
    i = start
    n = len(text)
    while i < n and text[i] in " \t\r\n":
        i += 1
    if i >= n:
        return None
    depth = 0
    in_string = False
    escaped = False
    first = text[i]
    if first not in "{[\"":
        j = i
        while j < n and text[j] not in ",}] \t\r\n)":
            j += 1
        return j if j < n else None
    for j in range(i, n):
        ch = text[j]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if depth == 0:
                    return j + 1
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def json_object_call(text: str, start: int, name_keys: tuple[str, ...], args_keys: tuple[str, ...]
                     ) -> tuple[PartialCall | None, int | None]:
    """Parse `{"name": "...", "arguments": {...}}` at `start` incrementally: (the call so far, end
    index once the object closed). The arguments are the raw JSON text as generated, so later
    parses of a longer text only extend it."""
    i = skip_ws(text, start)
    if i >= len(text) or text[i] != "{":
        return None, None
    end = json_value_end(text, i)
    if end is not None:
        try:
            obj = json.loads(text[i:end])
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            name = next((obj[k] for k in name_keys if isinstance(obj.get(k), str)), None)
            args_key = next((k for k in args_keys if k in obj), None)
            if name is not None:
                raw = _raw_member(text, i, end, args_key) if args_key else None
                if raw is None:
                    value = obj.get(args_key, {}) if args_key else {}
                    raw = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                                          separators=(",", ":"))
                return PartialCall(name, raw, complete=True), end
    # Incomplete: the name once its string closed, then the arguments text so far.
    call = PartialCall(None)
    j = i + 1
    while True:
        j = skip_ws(text, j)
        if j >= len(text) or text[j] != '"':
            return call, None
        key_end = json_value_end(text, j)
        if key_end is None:
            return call, None
        key = json.loads(text[j:key_end])
        j = skip_ws(text, key_end)
        if j >= len(text) or text[j] != ":":
            return call, None
        j = skip_ws(text, j + 1)
        if j >= len(text):
            return call, None
        value_end = json_value_end(text, j)
        if key in name_keys:
            if value_end is None:
                return call, None
            call.name = json.loads(text[j:value_end])
        elif key in args_keys:
            if call.name is None:
                return call, None  # arguments before the name: reported once the object closes
            call.arguments = text[j:value_end] if value_end is not None else text[j:]
            return call, None
        if value_end is None:
            return call, None
        j = skip_ws(text, value_end)
        if j < len(text) and text[j] == ",":
            j += 1


def _raw_member(text: str, start: int, end: int, key: str) -> str | None:
    """The raw text of member `key`'s value in the object text[start:end] (top level only)."""
    j = start + 1
    while j < end:
        j = skip_ws(text, j)
        if text[j] != '"':
            return None
        key_end = json_value_end(text, j)
        if key_end is None:
            return None
        k = json.loads(text[j:key_end])
        j = skip_ws(text, key_end) + 1
        j = skip_ws(text, j)
        value_end = json_value_end(text, j)
        if value_end is None:
            return None
        if k == key:
            return text[j:value_end]
        j = skip_ws(text, value_end)
        if j < end and text[j] == ",":
            j += 1
        else:
            return None
    return None
