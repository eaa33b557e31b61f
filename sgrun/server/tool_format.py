"""The server's side of tool calls: OpenAI tool definitions and turns <-> the call-format package
(sgrun.constrain.tool_calls), which knows every format's prompting text, constraint and parsers.
The format is the server's (detected from the chat template at start-up, or --tool-call-parser)."""

from __future__ import annotations

from typing import Any

from sgrun.constrain.tool_calls import (CallFormat, ParsedCall, ToolCallConstraint, ToolSchemaError, ToolSpec,
                                        arguments_object)
from sgrun.server.errors import APIError
from sgrun.server.protocol import FunctionCall, ToolCall, ToolDef
from sgrun.server.tool_plan import ToolPlan


def tool_spec(t: ToolDef) -> ToolSpec:
    params = t.function.parameters
    return ToolSpec(t.function.name, params if params is not None else {"type": "object", "properties": {}},
                    t.function.description or "")


def tool_specs(tools: list[ToolDef]) -> list[ToolSpec]:
    return [tool_spec(t) for t in tools]


def render_assistant_calls(fmt: CallFormat, calls: list[ToolCall]) -> str:
    """An assistant turn's tool_calls as the model wrote them (for templates that cannot render
    tool_calls themselves)."""
    return fmt.render([(c.function.name, arguments_object(c.function.arguments)) for c in calls])


def call_constraint(fmt: CallFormat, plan: ToolPlan, answer_schema: Any) -> ToolCallConstraint:
    """auto: free text or a response_format answer, or calls; required / named: calls only (a named
    choice is one call of that function)."""
    mode = "auto" if plan.mode == "auto" else "required"
    parallel = plan.parallel and plan.mode != "named"
    return ToolCallConstraint(fmt.name, tuple(tool_specs(plan.tools)), mode, parallel,
                              answer_schema if mode == "auto" else None)


def tool_error(exc: ToolSchemaError, indices: tuple[int, ...]) -> APIError:
    """A tool schema refusal as a 400 naming the tool's place in the request's `tools`."""
    index = indices[exc.index] if exc.index < len(indices) else exc.index
    message = str(exc).replace(f"tools[{exc.index}]", f"tools[{index}]", 1)
    return APIError(400, message, param=f"tools[{index}].function.parameters", code="constraint_error")


def response_calls(fmt: CallFormat, text: str, plan: ToolPlan) -> tuple[str | None, list[ToolCall] | None]:
    """(content, tool_calls) of a finished output. A call cut short keeps its partial arguments;
    one cut before its name leaves the text before it as the content (the markup it opened with is
    not content, as the streamed response never sends it)."""
    content, calls = fmt.parse_calls(text, tool_specs(plan.tools))
    known = [c for c in calls if c.name in {t.function.name for t in plan.tools}]
    if not known:
        if plan.mode in ("required", "named"):   # the output is call markup only, cut before a name
            return None, None
        return (content or None) if not calls else text, None
    return content, [to_openai_call(c) for c in known]


def to_openai_call(c: ParsedCall) -> ToolCall:
    return ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
