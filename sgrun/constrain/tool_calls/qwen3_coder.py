"""Qwen3-Coder XML calls:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A plain string parameter is written raw (no quotes or escapes) and may not contain `</parameter>`
anywhere (the parser, as vLLM's, ends the value at the first one: allowing it without the newline
let SmolLM2 write `Paris</parameter>\n</parameter>`, parsed as an unterminated argument); every
other value is JSON (as vLLM's qwen3_coder parser converts them by the
parameter's schema type)."""

from __future__ import annotations

import json
import re
from typing import Any

from sgrun.constrain.regex_ast import Node, alt, lit, rep, seq
from sgrun.constrain.tool_calls.call_format import CallFormat
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments, is_plain_string
from sgrun.constrain.tool_calls.tool_spec import PartialCall, ToolSpec, arguments_object, compact_json

OPEN, CLOSE = "<tool_call>", "</tool_call>"
PARAM_CLOSE = "\n</parameter>"
_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>\n?")
_PARAM = re.compile(r"\s*<parameter=([^>\n]+)>\n?")


class Qwen3CoderFormat(CallFormat):
    name = "qwen3_coder"
    opener = OPEN
    template_markers = ("<function=", "<parameter=")

    def tools_block(self, tools: list[ToolSpec]) -> str:
        listing = "\n".join(json.dumps(t.to_openai(), ensure_ascii=False) for t in tools)
        return ("# Tools\n\nYou have access to the following functions:\n\n<tools>\n" + listing + "\n</tools>\n\n"
                "If you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
                "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
                "</parameter>\n</function>\n</tool_call>")

    def calls_after_opener(self, tools: list[ToolArguments], parallel: bool) -> Node:
        branches = []
        for t in tools:
            props, _ = t.properties(self.name)
            members = []
            for p in props:
                value = t.raw_string_node(p, PARAM_CLOSE.lstrip("\n")) if p.raw_string else p.value
                members.append((seq(lit(f"<parameter={p.name}>\n"), value, lit(PARAM_CLOSE + "\n")), p.required))
            body = ("members", tuple(members), None, lit(""))
            branches.append(seq(lit(f"\n<function={t.tool.name}>\n"), body, lit("</function>\n" + CLOSE)))
        one = alt(*branches)
        # Blocks back to back, never a newline between them: see hermes.py for why.
        return seq(one, rep(seq(lit(OPEN), one), 0, None)) if parallel else one

    def parse_section(self, section: str, tools: dict[str, ToolSpec]) -> list[PartialCall]:
        calls: list[PartialCall] = []
        rest = section
        while True:
            m = _FUNCTION.match(rest)
            if m is None:
                return calls
            name = m.group(1).strip()
            call = PartialCall(name)
            calls.append(call)
            schema = tools.get(name)
            props = (schema.parameters.get("properties", {}) if schema and isinstance(schema.parameters, dict) else {})
            values, i = [], m.end()
            while True:
                pm = _PARAM.match(rest, i)
                if pm is None:
                    break
                end = rest.find("</parameter>", pm.end())
                if end < 0:
                    break
                pname = pm.group(1).strip()
                raw = rest[pm.end():end]
                raw = raw[:-1] if raw.endswith("\n") else raw
                values.append(f"{json.dumps(pname, ensure_ascii=False)}: "
                              f"{json.dumps(_convert(raw, props.get(pname), schema), ensure_ascii=False)}")
                i = end + len("</parameter>")
            fend = rest.find("</function>", i)
            closed = fend >= 0 and not rest[i:fend].strip()
            call.arguments = "{" + ", ".join(values) + ("}" if closed else "")
            if not closed:
                return calls
            after = rest.find(CLOSE, fend)
            call.complete = after >= 0
            if after < 0:
                return calls
            rest = rest[after + len(CLOSE):]
            k = rest.find(OPEN)
            if k < 0 or rest[:k].strip():
                return calls
            rest = rest[k + len(OPEN):]

    def render_result(self, content: str) -> str:
        return f"<tool_response>\n{content}\n</tool_response>"  # as Qwen3-Coder's own template writes it

    def render(self, calls: list[tuple[str, Any]]) -> str:
        out = []
        for name, args in calls:
            value = arguments_object(args) if isinstance(args, str) else args
            params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else compact_json(v)}{PARAM_CLOSE}\n"
                             for k, v in (value.items() if isinstance(value, dict) else ()))
            out.append(f"{OPEN}\n<function={name}>\n{params}</function>\n{CLOSE}")
        return "".join(out)


def _convert(raw: str, schema: Any, tool: ToolSpec | None) -> Any:
    """A raw parameter text -> its value: plain strings stay text, anything else is JSON (text
    that is not JSON stays text, as vLLM does, rather than losing the call)."""
    if _is_plain_string(schema, tool):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _is_plain_string(schema: Any, tool: ToolSpec | None) -> bool:
    for _ in range(8):
        if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and tool is not None):
            break
        schema = _local_ref(tool.parameters, schema["$ref"])
    if schema is None:
        return True  # a parameter the tool does not declare: keep its text
    return is_plain_string(schema)


def _local_ref(root: Any, ref: str) -> Any:
    if not ref.startswith("#/"):
        return None
    node = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node
