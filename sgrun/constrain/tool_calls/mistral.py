"""Mistral: `[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]` (Mistral 7B v0.3, Nemo, Small;
the JSON-array form vLLM's and SGLang's mistral parsers read)."""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.regex_ast import Node, lit, rep, seq
from sgrun.constrain.tool_calls.call_format import CallFormat, json_value_end, skip_ws
from sgrun.constrain.tool_calls.call_sequence import read_json_calls
from sgrun.constrain.tool_calls.json_call import SPACE, json_call_node, json_call_text
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments
from sgrun.constrain.tool_calls.tool_spec import PartialCall, ToolSpec

OPENER = "[TOOL_CALLS]"


class MistralFormat(CallFormat):
    name = "mistral"
    opener = OPENER
    template_markers = ("[TOOL_CALLS]", "[AVAILABLE_TOOLS]")

    def tools_block(self, tools: list[ToolSpec]) -> str:
        listing = json.dumps([t.to_openai() for t in tools], ensure_ascii=False)
        return (f"[AVAILABLE_TOOLS]{listing}[/AVAILABLE_TOOLS]\n"
                'To call tools, reply with [TOOL_CALLS] followed by a JSON list of '
                '{"name": <function-name>, "arguments": <args-json-object>} objects.')

    def calls_after_opener(self, tools: list[ToolArguments], parallel: bool) -> Node:
        one = json_call_node(tools, "arguments")
        body = seq(one, rep(seq(lit(","), SPACE, one), 0, None)) if parallel else one
        return seq(lit("["), body, lit("]"))

    def parse_section(self, section: str, tools: dict[str, ToolSpec]) -> list[PartialCall]:
        i = skip_ws(section, 0)
        if not section.startswith("[", i):
            # Mistral's newer tokenizers write `[TOOL_CALLS]name[ARGS]{...}`; read that too.
            return _name_args_calls(section)
        return read_json_calls(section, ("arguments", "parameters"), ",", start=i + 1, terminator="]")

    def render(self, calls: list[tuple[str, Any]]) -> str:
        return f"{OPENER}[{', '.join(json_call_text(name, args, 'arguments') for name, args in calls)}]"


def _name_args_calls(section: str) -> list[PartialCall]:
    calls = []
    for chunk in section.split(OPENER):
        name, sep, args = chunk.partition("[ARGS]")
        if not sep:
            continue
        start = skip_ws(args, 0)
        end = json_value_end(args, start)
        calls.append(PartialCall(name.strip(), args[start:] if end is None else args[start:end], end is not None))
    return calls
