"""Phi-4-mini: a JSON list of `{"name", "arguments"}` objects between `<|tool_call|>` and
`<|/tool_call|>`; the tools are offered as a JSON list between `<|tool|>` and `<|/tool|>` at the
end of the system message (Microsoft's template writes them there from the system message's
`tools` key, never from the `tools` variable, so sgrun writes that text itself)."""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.regex_ast import Node, lit, rep, seq
from sgrun.constrain.tool_calls.call_format import CallFormat
from sgrun.constrain.tool_calls.call_sequence import read_json_calls
from sgrun.constrain.tool_calls.json_call import json_call_node, json_call_text
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments
from sgrun.constrain.tool_calls.tool_spec import PartialCall, ToolSpec

OPEN, CLOSE = "<|tool_call|>", "<|/tool_call|>"


class Phi4MiniFormat(CallFormat):
    name = "phi4_mini"
    opener = OPEN
    template_markers = ("<|tool|>", "<|tool_call|>")

    def tools_block(self, tools: list[ToolSpec]) -> str:
        listing = json.dumps([t.to_openai()["function"] for t in tools], ensure_ascii=False)
        return f"<|tool|>{listing}<|/tool|>"

    def calls_after_opener(self, tools: list[ToolArguments], parallel: bool) -> Node:
        one = json_call_node(tools, "arguments")
        calls = seq(one, rep(seq(lit(", "), one), 0, None)) if parallel else one
        return seq(lit("["), calls, lit("]"), lit(CLOSE))

    def parse_section(self, section: str, tools: dict[str, ToolSpec]) -> list[PartialCall]:
        start = len(section) - len(section.lstrip())
        if not section.startswith("[", start):
            return []
        return read_json_calls(section, ("arguments", "parameters"), ",", start=start + 1, terminator="]")

    def render(self, calls: list[tuple[str, Any]]) -> str:
        return OPEN + "[" + ", ".join(json_call_text(name, args, "arguments") for name, args in calls) + "]" + CLOSE
