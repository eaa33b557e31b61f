"""Hermes / Qwen2.5: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call,
blocks separated by a newline (NousResearch Hermes 2/3, Qwen2.5, SmolLM2 and many fine-tunes)."""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.regex_ast import Node, alt, lit, opt, rep, seq
from sgrun.constrain.tool_calls.call_format import CallFormat, json_object_call, skip_ws
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments
from sgrun.constrain.tool_calls.tool_spec import PartialCall, ToolSpec, arguments_object, compact_json

OPEN, CLOSE, SEPARATOR = "<tool_call>", "</tool_call>", "\n"


def json_call_node(tools: list[ToolArguments], args_key: str) -> Node:
    """`{"name":"<tool>","<args_key>":<that tool's arguments>}`, one branch per tool."""
    return alt(*(seq(lit('{"name":' + json.dumps(t.tool.name, ensure_ascii=False) + f',"{args_key}":'),
                     t.json_node(), lit("}")) for t in tools))


def tools_listing(tools: list[ToolSpec]) -> str:
    return "\n".join(json.dumps(t.to_openai(), ensure_ascii=False) for t in tools)


class HermesFormat(CallFormat):
    name = "hermes"
    opener = OPEN
    template_markers = ("<tool_call>",)

    def tools_block(self, tools: list[ToolSpec]) -> str:
        return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n"
                f"<tools>\n{tools_listing(tools)}\n</tools>\n\n"
                "For each function call, return a json object with function name and arguments within "
                "<tool_call></tool_call> XML tags:\n"
                '<tool_call>{"name": <function-name>, "arguments": <args-json-object>}</tool_call>')

    def calls_after_opener(self, tools: list[ToolArguments], parallel: bool) -> Node:
        # Qwen2.5's own template writes a newline inside the block; allow it, never require it.
        one = seq(opt(lit("\n")), json_call_node(tools, "arguments"), opt(lit("\n")), lit(CLOSE))
        if not parallel:
            return one
        return seq(one, rep(seq(lit(SEPARATOR + OPEN), one), 0, None))

    def parse_section(self, section: str, tools: dict[str, ToolSpec]) -> list[PartialCall]:
        calls: list[PartialCall] = []
        rest = section
        while True:
            call, end = json_object_call(rest, 0, ("name",), ("arguments", "parameters"))
            if call is None:
                return calls
            calls.append(call)
            if end is None:
                return calls
            after = skip_ws(rest, end)
            if not rest.startswith(CLOSE, after):
                call.complete = False  # the arguments closed but the block did not (yet)
                return calls
            rest = rest[after + len(CLOSE):]
            k = skip_ws(rest, 0)
            if not rest.startswith(OPEN, k):
                return calls
            rest = rest[k + len(OPEN):]

    def render(self, calls: list[tuple[str, Any]]) -> str:
        return SEPARATOR.join(f'{OPEN}{{"name":{json.dumps(name, ensure_ascii=False)},"arguments":'
                              f'{_args_text(args)}}}{CLOSE}' for name, args in calls)


def _args_text(args: Any) -> str:
    value = arguments_object(args) if isinstance(args, str) else args
    return value if isinstance(value, str) else compact_json(value)
