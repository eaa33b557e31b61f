"""Gemma's convention: Python calls in a `tool_code` fence, results in a `tool_output` fence, as
Google's function-calling guide for Gemma prompts them (Gemma 2 and 3 have no tool markup of
their own in their chat templates):

    ```tool_code
    get_weather(city="Paris")
    ```

One call per line. The arguments are the pythonic format's (pythonic.py): compact JSON literals
of each property's schema, read back with Python's `True/False/None` as well."""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.regex_ast import Node, lit, rep, seq
from sgrun.constrain.tool_calls.call_sequence import read_call_sequence
from sgrun.constrain.tool_calls.pythonic import PythonicFormat, _read_call, call_text
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments
from sgrun.constrain.tool_calls.tool_spec import PartialCall, ToolSpec

OPEN, CLOSE = "```tool_code\n", "\n```"


class GemmaToolCodeFormat(PythonicFormat):
    name = "gemma"
    opener = OPEN
    anchored = False
    # Gemma's turn markers: its templates say nothing about tools, so the family is the marker.
    template_markers = ("<start_of_turn>",)

    def tools_block(self, tools: list[ToolSpec]) -> str:
        listing = "\n".join(json.dumps(t.to_openai(), ensure_ascii=False) for t in tools)
        return ("You have access to functions. If you decide to invoke any of the function(s), you MUST put it "
                "in the format of\n```tool_code\nfunc_name(param_name1=value1, param_name2=value2)\n```\n"
                "with one call per line, and nothing else in that block. The result of a call comes back "
                "in a ```tool_output``` block.\n\nThe functions, in JSON format:\n" + listing)

    def calls_after_opener(self, tools: list[ToolArguments], parallel: bool) -> Node:
        one = self.one_call(tools)
        calls = seq(one, rep(seq(lit("\n"), one), 0, None)) if parallel else one
        return seq(calls, lit(CLOSE))

    def parse_section(self, section: str, tools: dict[str, ToolSpec]) -> list[PartialCall]:
        # Calls one per line: the sequence reader skips the newline and reads the next name.
        return read_call_sequence(section, _read_call, "")

    def render(self, calls: list[tuple[str, Any]]) -> str:
        return OPEN + "\n".join(call_text(name, args) for name, args in calls) + CLOSE

    def render_result(self, content: str) -> str:
        return f"```tool_output\n{content}\n```"
