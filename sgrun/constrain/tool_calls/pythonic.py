"""Pythonic calls: `[get_weather(city="Paris"), add(a=1, b=2)]` (Llama 3.2 / 4 and other models
trained on Python-style calls; vLLM's `pythonic` parser).

The constraint writes each argument value as compact JSON of that property's schema, which is a
Python literal for strings, numbers, lists and dicts; booleans and null come out as JSON's
`true/false/null`, which the parser reads alongside Python's `True/False/None`."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from sgrun.constrain.errors import UnsupportedSchemaError
from sgrun.constrain.regex_ast import Node, alt, lit, rep, seq
from sgrun.constrain.tool_calls.call_format import CallFormat
from sgrun.constrain.tool_calls.call_sequence import read_call_sequence
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments
from sgrun.constrain.tool_calls.tool_spec import PartialCall, ToolSchemaError, ToolSpec, arguments_object, compact_json

_NAME = re.compile(r"\s*([A-Za-z_][\w.\-]*)\s*\(")
_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


class PythonicFormat(CallFormat):
    name = "pythonic"
    opener = "["
    anchored = True
    template_markers = ("[func_name1(params_name1=params_value1", "[func_name1(param1=value1")

    def tools_block(self, tools: list[ToolSpec]) -> str:
        listing = json.dumps([t.to_openai() for t in tools], ensure_ascii=False, indent=2)
        return ("You are an expert in composing functions. Here is a list of functions in JSON format that you "
                "can invoke:\n" + listing + "\n\nIf you decide to invoke any of the function(s), you MUST put it "
                "in the format of [func_name1(params_name1=params_value1, params_name2=params_value2...), "
                "func_name2(params)]\nYou SHOULD NOT include any other text in the response if you call a function.")

    def calls_after_opener(self, tools: list[ToolArguments], parallel: bool) -> Node:
        one = self.one_call(tools)
        calls = seq(one, rep(seq(lit(", "), one), 0, None)) if parallel else one
        return seq(calls, lit("]"))

    def one_call(self, tools: list[ToolArguments]) -> Node:
        """One `name(k=v, ...)` call of any of the tools."""
        branches = []
        for t in tools:
            if not t.tool.name.replace(".", "_").replace("-", "_").isidentifier():
                raise ToolSchemaError(t.index, t.tool.name, "the pythonic call format needs a tool name that is "
                                      "a Python identifier")
            props, _ = t.properties(self.name)
            members = []
            for p in props:
                if not p.name.isidentifier():
                    raise t._fail(UnsupportedSchemaError("properties", f"#/properties/{p.name}",
                                                         "a pythonic call needs argument names that are identifiers"))
                members.append((seq(lit(p.name + "="), p.value), p.required))
            body = ("members", tuple(members), None, lit(", "))
            branches.append(seq(lit(t.tool.name + "("), body, lit(")")))
        return alt(*branches)

    def parse_section(self, section: str, tools: dict[str, ToolSpec]) -> list[PartialCall]:
        return read_call_sequence(section, _read_call, ",")

    def render(self, calls: list[tuple[str, Any]]) -> str:
        return "[" + ", ".join(call_text(name, args) for name, args in calls) + "]"


def call_text(name: str, args: Any) -> str:
    """`name(k=v, ...)` with each value as compact JSON (as the constraint writes it)."""
    value = arguments_object(args) if isinstance(args, str) else args
    kwargs = ", ".join(f"{k}={compact_json(v)}" for k, v in value.items()) if isinstance(value, dict) else ""
    return f"{name}({kwargs})"


def _read_call(text: str, start: int) -> tuple[PartialCall | None, int | None]:
    """`name(k=v, ...)` at `start`: the call with the arguments read so far as JSON object text (a
    piece still being written is left out), and the index past `)` once it closed."""
    m = _NAME.match(text, start)
    if m is None:
        return None, None
    pieces, close = _split_arguments(text, m.end())
    values = []
    for piece in (pieces[:-1] if close is None else pieces):
        kv = _keyword(piece)
        if kv is None:
            break
        values.append(f"{json.dumps(kv[0], ensure_ascii=False)}: {json.dumps(kv[1], ensure_ascii=False)}")
    arguments = "{" + ", ".join(values) + ("}" if close is not None else "")
    return PartialCall(m.group(1), arguments, complete=close is not None), None if close is None else close + 1


def _split_arguments(text: str, start: int) -> tuple[list[str], int | None]:
    """Top-level comma-separated pieces from `start` up to the closing parenthesis (its index,
    or None while it has not appeared; then the last piece may be incomplete)."""
    pieces, depth, quote, escaped, begin = [], 0, "", False, start
    for j in range(start, len(text)):
        ch = text[j]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in "}]" or (ch == ")" and depth > 0):
            depth -= 1
        elif ch == ")":
            last = text[begin:j]
            if last.strip():
                pieces.append(last)
            return pieces, j
        elif ch == "," and depth == 0:
            pieces.append(text[begin:j])
            begin = j + 1
    pieces.append(text[begin:])
    return pieces, None


def _keyword(piece: str) -> tuple[str, Any] | None:
    name, sep, value = piece.partition("=")
    if not sep or not name.strip().isidentifier():
        return None
    try:
        return name.strip(), _literal(ast.parse(value.strip(), mode="eval").body)
    except (SyntaxError, ValueError):
        return None


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _literal(node.operand)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    raise ValueError("not a literal")
