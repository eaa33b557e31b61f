"""`sgrun.Agent`: a tool-calling loop as a DSL program.

Each turn the model first *chooses* (a `select` between starting a tool call and answering), then
a tool call is generated under a JSON Schema (anyOf over the tools: `{"name": enum, "arguments":
{...}}`), so even a small model emits a call sgrun can execute. The Python function runs, its
result (or its exception, as an error result) goes back as a `tool` message, and the loop goes
on until the model answers or `max_steps` tool calls were made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from sgrun.lang.backend import Backend
from sgrun.lang.function import SgFunction
from sgrun.lang.ir import assistant_begin, assistant_end, gen, role, select, system, user
from sgrun.lang.state import ProgramState
from sgrun.lang.tool_schema import function_to_tool

ToolChoice = Literal["auto", "required", "none"]

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
ANSWER_OPEN = "Answer:"

_INSTRUCTIONS = (
    "You can call these tools:\n<tools>\n{tools}\n</tools>\n"
    "To call a tool, reply with " + CALL_OPEN + '{{"name": <tool name>, "arguments": <arguments object>}}'
    + CALL_CLOSE + ". Each tool result comes back in a tool message. When you know the answer, "
    "reply with " + ANSWER_OPEN + " followed by the answer."
)


@dataclass
class ToolCall:
    name: str | None
    arguments: dict[str, Any] | None
    result: Any = None
    error: str | None = None       # the tool raised, or the call could not be parsed


@dataclass
class AgentResult:
    answer: str | None
    tool_calls: list[ToolCall]
    finish_reason: str             # "answer" | "max_steps"
    state: ProgramState = field(repr=False)


@dataclass
class _Tool:
    func: Callable[..., Any]
    spec: dict[str, Any]


class Agent:
    def __init__(self, tools: list[Callable[..., Any]] | tuple[Callable[..., Any], ...] = (),
                 system: str = "You are a helpful assistant.", max_steps: int = 4,
                 tool_choice: ToolChoice = "auto", max_tokens: int = 128, call_max_tokens: int = 128,
                 backend: Backend | None = None):
        self.system = system
        self.max_steps = max_steps
        self.tool_choice: ToolChoice = tool_choice
        self.max_tokens = max_tokens
        self.call_max_tokens = call_max_tokens
        self.backend = backend
        self._tools: dict[str, _Tool] = {}
        for func in tools:
            self.add_tool(func)
        self.program = SgFunction(self._loop)
        self.program.name = "agent"

    # --- tools ------------------------------------------------------------------------------
    def add_tool(self, func: Callable[..., Any], name: str | None = None,
                 description: str | None = None) -> Callable[..., Any]:
        spec = function_to_tool(func, name=name, description=description)
        tool_name = spec["function"]["name"]
        if tool_name in self._tools:
            raise ValueError(f"a tool named {tool_name!r} is already registered")
        self._tools[tool_name] = _Tool(func, spec)
        return func

    def tool(self, func: Callable[..., Any] | None = None, *, name: str | None = None,
             description: str | None = None) -> Any:
        """Decorator: `@agent.tool` or `@agent.tool(name=..., description=...)`."""
        if func is None:
            return lambda f: self.add_tool(f, name=name, description=description)
        return self.add_tool(func)

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [t.spec for t in self._tools.values()]

    def call_schema(self) -> dict[str, Any]:
        """JSON Schema every tool call must match: one branch per tool."""
        branches = [{"type": "object",
                     "properties": {"name": {"enum": [name]}, "arguments": t.spec["function"]["parameters"]},
                     "required": ["name", "arguments"], "additionalProperties": False}
                    for name, t in self._tools.items()]
        return branches[0] if len(branches) == 1 else {"anyOf": branches}

    def system_prompt(self) -> str:
        if not self._tools:
            return self.system
        listed = "\n".join(json.dumps(t.spec, ensure_ascii=False) for t in self._tools.values())
        return f"{self.system}\n\n{_INSTRUCTIONS.format(tools=listed)}"

    # --- running ------------------------------------------------------------------------------
    def run(self, question: str, backend: Backend | None = None, tool_choice: ToolChoice | None = None,
            max_steps: int | None = None, **sampling: Any) -> AgentResult:
        """Answer `question`, calling tools as the model decides. Greedy unless `temperature` is given.
        `tool_choice="required"` forces a tool call on the first turn, then lets the model decide."""
        state = self.program.run(question=question, tool_choice=tool_choice or self.tool_choice,
                                 max_steps=self.max_steps if max_steps is None else max_steps,
                                 backend=backend or self.backend, **{"temperature": 0.0, **sampling})
        return self.result(state)

    def run_batch(self, questions: list[str], backend: Backend | None = None, **options: Any) -> list[AgentResult]:
        states = self.program.run_batch(
            [{"question": q, "tool_choice": self.tool_choice, "max_steps": self.max_steps} for q in questions],
            backend=backend or self.backend, **{"temperature": 0.0, **options})
        return [self.result(s) for s in states]

    @staticmethod
    def result(state: ProgramState) -> AgentResult:
        state.raise_error()
        return AgentResult(answer=state["answer"], tool_calls=state["tool_calls"],
                           finish_reason=state["finish_reason"], state=state)

    def _loop(self, s: ProgramState, question: str, tool_choice: ToolChoice = "auto", max_steps: int = 4) -> None:
        calls: list[ToolCall] = []
        s += system(self.system_prompt())
        s += user(question)
        tool_role = "tool" if s._executor.roles.supports("tool") else "user"
        choice: ToolChoice = tool_choice if self._tools else "none"
        finish_reason = "answer"
        while True:
            if len(calls) >= max_steps and choice != "none":
                choice, finish_reason = "none", "max_steps"
            s += assistant_begin()
            if choice == "auto":
                s += select(f"decision_{len(calls)}", choices=[CALL_OPEN, ANSWER_OPEN])
                calling = s[f"decision_{len(calls)}"] == CALL_OPEN
            else:
                calling = choice == "required"
                s += CALL_OPEN if calling else ANSWER_OPEN
            if not calling:
                s += gen("answer", max_tokens=self.max_tokens)
                s += assistant_end()
                break
            name = f"call_{len(calls)}"
            s += gen(name, max_tokens=self.call_max_tokens, json_schema=self.call_schema()) + CALL_CLOSE
            s += assistant_end()
            call = self._execute(s[name])
            calls.append(call)
            s += role(tool_role, _result_text(call) if tool_role == "tool" else f"Tool result: {_result_text(call)}")
            choice = "auto"  # "required" applies to the first turn only (else the loop never ends)
        s.set_var("answer", s["answer"].strip())
        s.set_var("tool_calls", calls)
        s.set_var("finish_reason", finish_reason)

    def _execute(self, call_text: str) -> ToolCall:
        try:
            call = json.loads(call_text)
            name, arguments = call["name"], call["arguments"]
        except (ValueError, KeyError, TypeError) as exc:
            return ToolCall(None, None, error=f"invalid tool call {call_text!r}: {exc}")
        tool = self._tools.get(name)
        if tool is None:
            return ToolCall(name, arguments, error=f"unknown tool {name!r}")
        try:
            return ToolCall(name, arguments, result=tool.func(**arguments))
        except Exception as exc:  # noqa: BLE001 - a tool failure is the model's to handle, not the caller's
            return ToolCall(name, arguments, error=f"{type(exc).__name__}: {exc}")


def _result_text(call: ToolCall) -> str:
    if call.error is not None:
        return json.dumps({"error": call.error}, ensure_ascii=False)
    if isinstance(call.result, str):
        return call.result
    return json.dumps(call.result, ensure_ascii=False, default=str)
