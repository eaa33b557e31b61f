"""What a request's `tools`, `tool_choice` and `parallel_tool_calls` mean: which tools the model
may call and whether it must; the OpenAI-side checks of those fields. Knows nothing of the
call format (tool_format.py, sgrun.constrain.tool_calls)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sgrun.server.errors import bad_request
from sgrun.server.protocol import ToolChoiceNamed, ToolDef


@dataclass
class ToolPlan:
    """What a request's tools/tool_choice mean for prompting, constraining and parsing."""
    mode: str                              # "none" | "auto" | "required" | "named"
    tools: list[ToolDef] = field(default_factory=list)  # the tools the model may call
    parallel: bool = True
    indices: list[int] = field(default_factory=list)     # each tool's position in the request's `tools`

    @property
    def expects_calls(self) -> bool:
        return self.mode in ("auto", "required", "named")


def plan_tools(tools: list[ToolDef] | None, tool_choice: str | ToolChoiceNamed | None,
               parallel_tool_calls: bool | None) -> ToolPlan:
    tools = tools or []
    names = [t.function.name for t in tools]
    for i, t in enumerate(tools):
        if t.type != "function":
            raise bad_request(f"tool type {t.type!r} is not supported; use 'function'", param=f"tools[{i}].type")
        if not t.function.name:
            raise bad_request("tool function name must not be empty", param=f"tools[{i}].function.name")
        if t.function.parameters is not None and not isinstance(t.function.parameters, dict):
            raise bad_request("tool parameters must be a JSON Schema object", param=f"tools[{i}].function.parameters")
    if len(set(names)) != len(names):
        raise bad_request("tool function names must be unique", param="tools")
    parallel = True if parallel_tool_calls is None else parallel_tool_calls
    if tool_choice is None:
        tool_choice = "auto" if tools else "none"
    if isinstance(tool_choice, ToolChoiceNamed):
        name = tool_choice.function.name
        if name not in names:
            raise bad_request(f"tool_choice names function {name!r}, which is not in tools", param="tool_choice")
        return ToolPlan("named", [tools[names.index(name)]], parallel, [names.index(name)])
    if tool_choice not in ("none", "auto", "required"):
        raise bad_request(f"tool_choice must be 'none', 'auto', 'required' or a function object, got {tool_choice!r}",
                          param="tool_choice")
    if tool_choice != "none" and not tools:
        raise bad_request(f"tool_choice {tool_choice!r} needs a non-empty 'tools' list", param="tool_choice")
    chosen = tools if tool_choice != "none" else []
    return ToolPlan(tool_choice, chosen, parallel, list(range(len(chosen))))


def tool_json(t: ToolDef) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": t.function.name}
    if t.function.description:
        fn["description"] = t.function.description
    fn["parameters"] = t.function.parameters or {"type": "object", "properties": {}}
    return {"type": "function", "function": fn}
