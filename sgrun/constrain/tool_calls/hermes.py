"""Hermes / Qwen2.5: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call
(NousResearch Hermes 2/3, Qwen2.5, SmolLM2 and many fine-tunes).

sgrun writes the blocks back to back. A newline between them (as Qwen2.5's template renders them)
would be the only way on to a second call, and a newline is also what a model writes when it means to
go on in prose: forced into `<tool_call>` it turns "end the line" into "call again" (SmolLM2 prefers
the newline to the end of its turn after a complete call). Back to back, the choice after
`</tool_call>` is between the end of the turn and `<`, a token that means a new block. The parser
still reads blocks separated by whitespace, as other models write them."""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.regex_ast import Node, lit, opt, rep, seq
from sgrun.constrain.tool_calls.call_format import CallFormat
from sgrun.constrain.tool_calls.call_sequence import read_json_calls
from sgrun.constrain.tool_calls.json_call import json_call_node, json_call_text
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments
from sgrun.constrain.tool_calls.tool_spec import PartialCall, ToolSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"


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
        return seq(one, rep(seq(lit(OPEN), one), 0, None))

    def parse_section(self, section: str, tools: dict[str, ToolSpec]) -> list[PartialCall]:
        return read_json_calls(section, ("arguments", "parameters"), OPEN, closer=CLOSE)

    def render_result(self, content: str) -> str:
        # Hermes 2 Pro's convention. Untagged, SmolLM2 reads a result as a prompt to make the same
        # call again; tagged, it answers from the result.
        return f"<tool_response>\n{content}\n</tool_response>"

    def render(self, calls: list[tuple[str, Any]]) -> str:
        return "".join(f"{OPEN}{json_call_text(name, args, 'arguments')}{CLOSE}" for name, args in calls)
