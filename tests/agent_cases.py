"""The agent suite's cases (tests/data/agent_cases.json): 20 tool-calling prompts with the tools each
offers and what a right answer is, shared by tests/test_agent_suite.py (which asserts structure) and
benchmarks/bench_agents.py (which scores accuracy against llama-server on the same prompts)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "agent_cases.json"


@dataclass
class AgentCase:
    id: str
    kind: str
    tools: list[dict[str, Any]]          # OpenAI tool objects
    user: str
    expect: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)   # earlier calls with their results

    @property
    def wants_answer(self) -> bool:
        """A final answer in text is right (the results it needs were fed back)."""
        return "answer_contains" in self.expect

    def messages(self) -> list[dict[str, Any]]:
        """The chat so far: the user's request, then each earlier call and its result as OpenAI turns."""
        out: list[dict[str, Any]] = [{"role": "user", "content": self.user}]
        for i, h in enumerate(self.history):
            call_id = f"call_{self.id}_{i}"
            out.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": h["name"], "arguments": json.dumps(h["arguments"])}}]})
            out.append({"role": "tool", "tool_call_id": call_id, "content": h["result"]})
        return out

    def schema(self, name: str) -> dict[str, Any] | None:
        return next((t["function"]["parameters"] for t in self.tools if t["function"]["name"] == name), None)

    def call_is_right(self, name: str | None, arguments: Any) -> bool:
        """The expected tool, with the expected argument values (strings compared without case;
        `contains`: a substring of the value)."""
        if name != self.expect.get("name") or not isinstance(arguments, dict):
            return False
        return (_matches(self.expect.get("arguments", {}), arguments, exact=True)
                and _matches(self.expect.get("contains", {}), arguments, exact=False))

    def answer_is_right(self, text: str | None) -> bool:
        return bool(text) and self.expect["answer_contains"].lower() in text.lower()

    def is_right(self, content: str | None, calls: list[tuple[str, Any]]) -> bool:
        """Accuracy of one turn: a call case needs its first call right; an answer case a text
        answer (and no call) that carries the result."""
        if self.wants_answer:
            return not calls and self.answer_is_right(content)
        return bool(calls) and self.call_is_right(*calls[0])


def _matches(want: dict[str, Any], got: dict[str, Any], exact: bool) -> bool:
    for key, value in want.items():
        have = got.get(key)
        if isinstance(value, dict):
            if not (isinstance(have, dict) and _matches(value, have, exact)):
                return False
        elif isinstance(value, str):
            if not isinstance(have, str):
                return False
            a, b = value.lower(), have.lower().strip()
            if (a != b) if exact else (a not in b):
                return False
        elif isinstance(value, bool) or not isinstance(have, (int, float)) or have != value:
            return False
    return True


def load_cases() -> list[AgentCase]:
    data = json.loads(DATA.read_text())
    tools = {name: {"type": "function", "function": {"name": name, **spec}} for name, spec in data["tools"].items()}
    return [AgentCase(c["id"], c["kind"], [tools[n] for n in c["tools"]], c["user"], c["expect"], c.get("history", []))
            for c in data["cases"]]


# The tools of the report in issue 25, as a new user wrote them.
ISSUE_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                                          "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web",
                                      "parameters": {"type": "object", "properties": {
                                          "query": {"type": "string", "maxLength": 60}}, "required": ["query"]}}},
]
# The same two tools as another user writes them (a shorter description, `unit` optional): with the
# call held to compact JSON the default model's choice between them was a near tie, and it called
# search("c") here (docs/agents.md).
ISSUE_TOOLS_UNIT_OPTIONAL = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                                          "required": ["city"]}}},
    ISSUE_TOOLS[1],
]
