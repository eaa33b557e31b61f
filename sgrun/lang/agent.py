"""sgrun.Agent: a tool-calling loop as a DSL program, on the same tool-call package as the server
(sgrun.constrain.tool_calls): the call format's tools block in the system prompt, each assistant
turn generated under the format's constraint (free text, or calls held to each tool's schema;
calls only when a call is required), the calls parsed by the format's parser, the Python
functions run, and their results (or exceptions, as error results) sent back as `tool` messages,
until the model answers in text or `max_steps` calls were made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from sgrun.constrain.tool_calls import CallFormat, ToolCallConstraint, ToolSpec, detect_format, get_format
from sgrun.lang.backend import Backend
from sgrun.lang.function import SgFunction
from sgrun.lang.ir import assistant_begin, assistant_end, gen, role, system, user
from sgrun.lang.state import ProgramState
from sgrun.lang.tool_schema import function_to_tool

ToolChoice = Literal["auto", "required", "none"]


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
                 backend: Backend | None = None, call_format: str | None = None):
        """`call_format` names the tool-call format (hermes, qwen3_coder, llama3_json, pythonic,
        mistral, phi4_mini, gemma); None detects it from the backend's chat template when the
        agent runs, as the server does (Hermes for a template that says nothing about tools)."""
        self.system = system
        self.fixed_format: CallFormat | None = get_format(call_format) if call_format else None
        self.format: CallFormat = self.fixed_format or get_format("hermes")
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

    def tool_specs(self) -> list[ToolSpec]:
        return [ToolSpec.from_openai(t.spec) for t in self._tools.values()]

    def call_constraint(self, mode: str) -> dict[str, Any]:
        """SamplingParams.tool_calls for one turn: "auto" (text or calls) or "required" (calls only)."""
        return ToolCallConstraint(self.format.name, tuple(self.tool_specs()), mode).to_dict()

    def system_prompt(self) -> str:
        if not self._tools:
            return self.system
        return f"{self.system}\n\n{self.format.tools_block(self.tool_specs())}"

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

    def format_for(self, backend: Backend) -> CallFormat:
        """The call format this agent speaks on `backend`: the one it was given, else the one its
        chat template describes."""
        if self.fixed_format is not None:
            return self.fixed_format
        template = backend.chat_template
        return detect_format(template.source if template is not None else None)

    def _loop(self, s: ProgramState, question: str, tool_choice: ToolChoice = "auto", max_steps: int = 4) -> None:
        self.format = self.format_for(s._executor.backend)
        calls: list[ToolCall] = []
        s += system(self.system_prompt())
        s += user(question)
        tool_role = "tool" if s._executor.roles.supports("tool") else "user"
        choice: ToolChoice = tool_choice if self._tools else "none"
        finish_reason = "answer"
        answer: str | None = None
        turn = 0
        while True:
            if len(calls) >= max_steps and choice != "none":
                choice, finish_reason = "none", "max_steps"
            name = f"turn_{turn}"
            turn += 1
            if choice == "none":
                s += assistant_begin() + gen(name, max_tokens=self.max_tokens) + assistant_end()
                answer = s[name]
                break
            limit = self.call_max_tokens if choice == "required" else max(self.max_tokens, self.call_max_tokens)
            s += assistant_begin() + gen(name, max_tokens=limit, tool_calls=self.call_constraint(choice)) \
                + assistant_end()
            content, parsed = self.format.parse_calls(s[name], self.tool_specs())
            if not parsed:
                answer = content
                break
            for p in parsed:
                call = self._execute(p.name, p.arguments)
                calls.append(call)
                result = self.format.render_result(_result_text(call))
                s += role(tool_role, result if tool_role == "tool" else f"Tool result: {result}")
            choice = "auto"  # "required" applies to the first turn only (else the loop never ends)
        s.set_var("answer", (answer or "").strip())
        s.set_var("tool_calls", calls)
        s.set_var("finish_reason", finish_reason)

    def _execute(self, name: str, arguments_text: str) -> ToolCall:
        try:
            arguments = json.loads(arguments_text) if arguments_text.strip() else {}
        except ValueError as exc:
            return ToolCall(name, None, error=f"invalid arguments {arguments_text!r} (the call was cut short?): {exc}")
        tool = self._tools.get(name)
        if tool is None:
            return ToolCall(name, arguments, error=f"unknown tool {name!r}")
        if not isinstance(arguments, dict):
            return ToolCall(name, None, error=f"arguments must be an object, got {arguments_text!r}")
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
