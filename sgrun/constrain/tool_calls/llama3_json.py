"""Llama 3.1 / 3.2 / 3.3 JSON calls: `{"name": "f", "parameters": {...}}`, optionally after the
`<|python_tag|>` token, several separated by `; ` (the form Meta's templates ask for and vLLM's
llama3_json parser reads)."""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.regex_ast import Node, alt, lit, opt, rep, seq
from sgrun.constrain.tool_calls.call_format import CallFormat
from sgrun.constrain.tool_calls.call_sequence import read_json_calls
from sgrun.constrain.tool_calls.json_call import json_call_text
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments
from sgrun.constrain.tool_calls.tool_spec import PartialCall, ToolSpec

PYTHON_TAG = "<|python_tag|>"
OPENER = '{"name"'
SEPARATOR = "; "


class Llama3JsonFormat(CallFormat):
    name = "llama3_json"
    opener = OPENER
    template_markers = ("<|python_tag|>", '"parameters": dictionary of argument name')

    def tools_block(self, tools: list[ToolSpec]) -> str:
        listing = "\n\n".join(json.dumps(t.to_openai(), ensure_ascii=False, indent=4) for t in tools)
        return ("Given the following functions, please respond with a JSON for a function call with its proper "
                "arguments that best answers the given prompt.\n\n"
                'Respond in the format {"name": function name, "parameters": dictionary of argument name and '
                "its value}. Do not use variables.\n\n" + listing)

    def calls_after_opener(self, tools: list[ToolArguments], parallel: bool) -> Node:
        sp = opt(lit(" "))  # Meta's models write `": "`; compact is allowed too
        rest = alt(*(seq(lit(":"), sp, lit(json.dumps(t.tool.name, ensure_ascii=False) + ","), sp,
                         lit('"parameters":'), sp, t.json_node(), lit("}")) for t in tools))
        if not parallel:
            return rest
        return seq(rest, rep(seq(lit(SEPARATOR + OPENER), rest), 0, None))

    def parse(self, text: str, tools: Any = None, final: bool = True):
        got = super().parse(text, tools, final)
        if got.content.endswith(PYTHON_TAG):
            got.content = got.content[:-len(PYTHON_TAG)]
        elif not got.calls and not final and PYTHON_TAG in got.content:
            # `<|python_tag|>` announces a call: hold it (and what follows) until the call shows.
            k = got.content.index(PYTHON_TAG)
            got.held = got.content[k:] + got.held
            got.content = got.content[:k]
        return got

    def parse_section(self, section: str, tools: dict[str, ToolSpec]) -> list[PartialCall]:
        # The opener is the call's own first characters: read the call from them.
        return read_json_calls(OPENER + section, ("parameters", "arguments"), SEPARATOR.strip())

    def render(self, calls: list[tuple[str, Any]]) -> str:
        return SEPARATOR.join(json_call_text(name, args, "parameters") for name, args in calls)
