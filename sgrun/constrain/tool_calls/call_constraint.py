"""The constraint of a request with tools: calls held to the tools' schemas, in the model's call
format, combined with what the request allows instead of calls (free text in `auto` mode, a
response_format answer, or nothing when a call is required)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sgrun.constrain.byte_nfa import ByteNFA
from sgrun.constrain.json_schema import SchemaCompiler
from sgrun.constrain.regex_ast import NOTHING, Node, alt, lit, seq
from sgrun.constrain.tool_calls.registry import get_format
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments
from sgrun.constrain.tool_calls.tool_spec import ToolSpec
from sgrun.constrain.triggered import triggered_node
from sgrun.errors import ConstraintError


@dataclass(frozen=True)
class ToolCallConstraint:
    """What a request's tools mean for its output.

    mode: "auto" (the model decides: an answer, or calls from the opener on), "required"
    (calls only; a named tool_choice is "required" with that one tool) or "none" (tools are in
    the prompt but the answer is text that never opens a call).
    answer_schema: in auto mode, a text answer must match this JSON Schema (True: any JSON
    value); None: a text answer is free text."""
    format: str
    tools: tuple[ToolSpec, ...]
    mode: str = "auto"
    parallel: bool = True
    answer_schema: Any = None
    whitespace: str = "spaced"    # inside the arguments: compact or json.dumps' one space (json_call.py)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ToolCallConstraint":
        """From the JSON form SamplingParams.tool_calls carries: {"format", "tools" (OpenAI tool
        objects), "mode", "parallel", "answer_schema"}."""
        unknown = sorted(set(d) - {"format", "tools", "mode", "parallel", "answer_schema"})
        if unknown:
            raise ConstraintError(f"tool_calls: unknown key {unknown[0]!r}")
        tools = d.get("tools")
        if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("function", t), dict)
                                                  and isinstance(t.get("function", t).get("name"), str) for t in tools):
            raise ConstraintError("tool_calls.tools must be a list of {\"type\": \"function\", \"function\": "
                                  "{\"name\", \"parameters\"}} objects")
        return cls(str(d.get("format", "hermes")), tuple(ToolSpec.from_openai(t) for t in tools),
                   str(d.get("mode", "auto")), bool(d.get("parallel", True)), d.get("answer_schema"))

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "tools": [t.to_openai() for t in self.tools], "mode": self.mode,
                "parallel": self.parallel, "answer_schema": self.answer_schema}

    def spec(self) -> str:
        """Canonical text of the constraint (the compiled-constraint cache key)."""
        return json.dumps({"format": self.format, "tools": [t.to_openai() for t in self.tools], "mode": self.mode,
                           "parallel": self.parallel, "answer": self.answer_schema, "ws": self.whitespace},
                          sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def tool_calls_node(c: ToolCallConstraint, nfa: ByteNFA) -> Node:
    if c.mode not in ("auto", "required", "none"):
        raise ConstraintError(f"tool-call mode must be 'auto', 'required' or 'none', got {c.mode!r}")
    fmt = get_format(c.format)
    if c.mode == "none":
        return triggered_node([(fmt.opener, NOTHING)], free_may_end=True, anchored=fmt.anchored)
    if not c.tools:
        raise ConstraintError("a tool-call constraint needs at least one tool")
    args = [ToolArguments(i, t, nfa, c.whitespace) for i, t in enumerate(c.tools)]
    after = fmt.calls_after_opener(args, c.parallel)
    if c.mode == "required":
        return seq(lit(fmt.opener), after)
    if c.answer_schema is not None:
        answer = ("call", SchemaCompiler({} if c.answer_schema is True else c.answer_schema,
                                         whitespace=c.whitespace, nfa=nfa).compile_root())
        return alt(answer, seq(lit(fmt.opener), after))
    return triggered_node([(fmt.opener, after)], free_may_end=True, anchored=fmt.anchored)
