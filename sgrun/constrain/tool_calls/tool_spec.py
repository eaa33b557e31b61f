"""The data every call format works on: a tool's definition, a parsed call, and the pieces of a
call as streaming reveals them."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from sgrun.errors import ConstraintError

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolSpec:
    """One function tool: OpenAI's {"type": "function", "function": {name, description, parameters}}."""
    name: str
    parameters: Any = field(default_factory=lambda: dict(EMPTY_PARAMETERS))
    description: str = ""

    @classmethod
    def from_openai(cls, tool: dict[str, Any]) -> "ToolSpec":
        fn = tool.get("function", tool)
        params = fn.get("parameters")
        return cls(name=fn["name"], parameters=params if params is not None else dict(EMPTY_PARAMETERS),
                   description=fn.get("description") or "")

    def to_openai(self) -> dict[str, Any]:
        fn: dict[str, Any] = {"name": self.name}
        if self.description:
            fn["description"] = self.description
        fn["parameters"] = self.parameters
        return {"type": "function", "function": fn}


@dataclass
class ParsedCall:
    """A call as the client sees it: `arguments` is JSON text (possibly cut short when the
    output was truncated; then `complete` is False)."""
    name: str
    arguments: str
    complete: bool = True
    id: str = field(default_factory=lambda: new_call_id())

    def arguments_value(self) -> Any:
        return json.loads(self.arguments) if self.arguments.strip() else {}


@dataclass
class PartialCall:
    """A call while its text is still arriving: the name once it is whole, and the argument JSON
    text so far. Successive parses of a growing text only ever extend `arguments`."""
    name: str | None
    arguments: str = ""
    complete: bool = False


@dataclass
class CallsParse:
    """A parse of (part of) an assistant output: text before the calls, and the calls."""
    content: str
    calls: list[PartialCall]
    held: str = ""          # trailing text that may still become a call opener (not yet content)


@dataclass
class CallDelta:
    """One OpenAI streaming tool-call delta: the first of a call has id and name (arguments "");
    later ones carry argument fragments only."""
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def arguments_object(arguments: str | dict[str, Any] | None) -> Any:
    """A client's tool_call arguments (JSON text, or already an object) as a value; text that is
    not JSON stays text (re-rendered as is, so a bad turn from the client is not rewritten)."""
    if arguments is None:
        return {}
    if not isinstance(arguments, str):
        return arguments
    if not arguments.strip():
        return {}
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


class ToolSchemaError(ConstraintError):
    """A tool's parameters schema that cannot be enforced exactly; names the tool, the keyword
    and its JSON pointer inside that tool's parameters."""

    def __init__(self, index: int, tool: str, message: str, keyword: str | None = None, pointer: str | None = None):
        self.index = index
        self.tool = tool
        self.keyword = keyword
        self.pointer = pointer
        self.param = f"tools[{index}].function.parameters"
        super().__init__(f"{self.param} (tool {tool!r}): {message}")
