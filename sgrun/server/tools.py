"""Tool calling: how tool definitions reach the model, the constraint that makes calls
well-formed, and parsing calls back out of generated text (whole, or incrementally while
streaming).

The call format is `<tool_call>{"name":"f","arguments":{...}}</tool_call>` (Hermes / Qwen
style), one per call, separated by a newline. Calls are generated as compact JSON so that
an assistant turn sent back by the client renders to exactly the tokens the model produced."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from outlines_core.json_schema import build_regex_from_schema

from sgrun.errors import ConstraintError
from sgrun.server.errors import APIError, bad_request
from sgrun.server.protocol import ToolCall, ToolChoiceNamed, ToolDef, FunctionCall

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
CALL_SEPARATOR = "\n"

# Generated JSON is compact; no free whitespace lets a small model ramble.
_WHITESPACE = ""


@dataclass
class ToolPlan:
    """What a request's tools/tool_choice mean for prompting, constraining and parsing."""
    mode: str                              # "none" | "auto" | "required" | "named"
    tools: list[ToolDef] = field(default_factory=list)  # the tools the model may call
    parallel: bool = True

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
        return ToolPlan("named", [tools[names.index(name)]], parallel)
    if tool_choice not in ("none", "auto", "required"):
        raise bad_request(f"tool_choice must be 'none', 'auto', 'required' or a function object, got {tool_choice!r}",
                          param="tool_choice")
    if tool_choice != "none" and not tools:
        raise bad_request(f"tool_choice {tool_choice!r} needs a non-empty 'tools' list", param="tool_choice")
    return ToolPlan(tool_choice, tools if tool_choice != "none" else [], parallel)


# --------------------------------------------------------------------------- prompting


def tool_json(t: ToolDef) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": t.function.name}
    if t.function.description:
        fn["description"] = t.function.description
    fn["parameters"] = t.function.parameters or {"type": "object", "properties": {}}
    return {"type": "function", "function": fn}


def default_tools_block(tools: list[ToolDef]) -> str:
    """The system-prompt text listing tools, for chat templates that do not render tools."""
    listing = "\n".join(json.dumps(tool_json(t), ensure_ascii=False) for t in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{listing}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n"
            '<tool_call>{"name":<function-name>,"arguments":<args-json-object>}</tool_call>')


def render_call(name: str, arguments: str) -> str:
    """The text of one call, as the model generates it (arguments re-serialised compactly)."""
    try:
        args = json.loads(arguments) if arguments.strip() else {}
        args_text = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    except json.JSONDecodeError:
        args_text = arguments  # the client sent non-JSON arguments; pass them through untouched
    return f'{CALL_OPEN}{{"name":{json.dumps(name, ensure_ascii=False)},"arguments":{args_text}}}{CALL_CLOSE}'


# --------------------------------------------------------------------------- constraining


def check_parameter_schemas(tokenizer: Any, tools: list[ToolDef]) -> None:
    """Compile each tool's parameters schema with sgrun's own JSON Schema compiler (cached), so an
    unsupported keyword is a 400 naming the keyword, its path and the tool, exactly as for
    response_format."""
    from sgrun.constrain import compile_constraint
    for i, t in enumerate(tools):
        if t.function.parameters is None:
            continue
        try:
            compile_constraint(tokenizer, json_schema=t.function.parameters)
        except ConstraintError as exc:
            raise APIError(400, f"tools[{i}].function.parameters ({t.function.name}): {exc}",
                           param=f"tools[{i}].function.parameters", code="constraint_error") from exc


def _call_regex(tools: list[ToolDef]) -> str:
    """Regex for one call's JSON: {"name": <one tool's name>, "arguments": <that tool's params>}."""
    variants = []
    for i, t in enumerate(tools):
        params = t.function.parameters or {"type": "object", "properties": {}}
        schema = {"type": "object",
                  "properties": {"name": {"const": t.function.name}, "arguments": params},
                  "required": ["name", "arguments"]}
        try:
            variants.append(build_regex_from_schema(json.dumps(schema), whitespace_pattern=_WHITESPACE))
        except (ValueError, TypeError, RuntimeError) as exc:  # outlines-core raises ValueError on bad schemas
            raise APIError(400, f"tools[{i}].function.parameters: unsupported or invalid JSON Schema: {exc}",
                           param=f"tools[{i}].function.parameters", code="constraint_error") from exc
        except BaseException as exc:  # pyo3 panics surface as PanicException (a BaseException)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise APIError(400, f"tools[{i}].function.parameters: JSON Schema not supported: {exc}",
                           param=f"tools[{i}].function.parameters", code="constraint_error") from exc
    return "(" + "|".join(f"({v})" for v in variants) + ")"


def _escape(text: str) -> str:
    return "".join("\\" + c if c in r".^$*+?{}[]\|()" else c for c in text)


def tool_call_regex(plan: ToolPlan) -> str:
    """The regex the output must match under this plan (auto: free text not starting with '<',
    or calls; required / named: calls only)."""
    call = f"{_escape(CALL_OPEN)}{_call_regex(plan.tools)}{_escape(CALL_CLOSE)}"
    # A named tool_choice means one call of that function; otherwise parallel_tool_calls decides.
    calls = f"{call}({_escape(CALL_SEPARATOR)}{call})*" if (plan.parallel and plan.mode != "named") else call
    if plan.mode == "auto":
        return rf"([^<][\s\S]*)?|{calls}"
    return calls


# --------------------------------------------------------------------------- parsing


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def parse_tool_calls(text: str) -> list[ToolCall] | None:
    """Calls in `text` if it is a sequence of well-formed calls (optionally surrounded by
    whitespace); None when it is an ordinary answer or the calls are malformed/truncated."""
    rest = text.strip()
    if not rest.startswith(CALL_OPEN):
        return None
    calls: list[ToolCall] = []
    decoder = json.JSONDecoder()
    while rest:
        if not rest.startswith(CALL_OPEN):
            return None
        try:
            obj, end = decoder.raw_decode(rest, len(CALL_OPEN))
        except json.JSONDecodeError:
            return None
        after = rest[end:].lstrip()
        if not after.startswith(CALL_CLOSE) or not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return None
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append(ToolCall(id=new_call_id(), function=FunctionCall(
            name=obj["name"], arguments=json.dumps(args, ensure_ascii=False, separators=(",", ":")))))
        rest = after[len(CALL_CLOSE):].lstrip()
    return calls


@dataclass
class ToolCallDeltaPiece:
    """One step of streamed tool-call output: a new call (id + name) or an argument fragment."""
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str | None = None


class StreamingToolParser:
    """Splits streamed text into content deltas and tool-call deltas.

    Text is held back while it could still be the start of `<tool_call>`; once it cannot, the
    output is an ordinary answer and passes through. Inside a call, the name is emitted when
    it is complete, then argument text as it arrives (tracking JSON nesting to find its end)."""

    _NAME_KEY = '"name"'
    _ARGS_KEY = '"arguments"'

    def __init__(self) -> None:
        self.buffer = ""          # text not yet turned into deltas
        self.mode = "undecided"   # "undecided" | "text" | "calls"
        self.num_calls = 0
        self.any_calls = False
        # state inside the current call
        self._in_call = False
        self._name_sent = False
        self._in_args = False
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._args_started = False

    def feed(self, delta: str) -> tuple[str, list[ToolCallDeltaPiece]]:
        """Returns (content text to send, tool-call pieces to send) for this delta."""
        self.buffer += delta
        if self.mode == "undecided":
            head = self.buffer.lstrip()
            if not head:
                return "", []
            if head.startswith(CALL_OPEN):
                self.mode = "calls"
                self.buffer = head
            elif CALL_OPEN.startswith(head):
                return "", []
            else:
                self.mode = "text"
        if self.mode == "text":
            out, self.buffer = self.buffer, ""
            return out, []
        return "", self._parse_calls()

    def finish(self) -> tuple[str, list[ToolCallDeltaPiece]]:
        """Flush at the end: held-back text that never became a call is content."""
        if self.mode == "undecided":
            out, self.buffer = self.buffer, ""
            return out, []
        if self.mode == "text":
            out, self.buffer = self.buffer, ""
            return out, []
        return "", self._parse_calls()

    def _parse_calls(self) -> list[ToolCallDeltaPiece]:
        pieces: list[ToolCallDeltaPiece] = []
        progressed = True
        while progressed:
            progressed = False
            if not self._in_call:
                head = self.buffer.lstrip()
                if head.startswith(CALL_OPEN):
                    self.buffer = head[len(CALL_OPEN):]
                    self._start_call()
                    progressed = True
                continue
            if not self._name_sent:
                name = self._try_name()
                if name is None:
                    break
                pieces.append(ToolCallDeltaPiece(self.num_calls, id=new_call_id(), name=name, arguments=""))
                self.any_calls = True
                self._name_sent = True
                progressed = True
                continue
            if not self._in_args:
                i = self.buffer.find(self._ARGS_KEY)
                if i < 0:
                    break
                j = self.buffer.find(":", i + len(self._ARGS_KEY))
                if j < 0:
                    break
                self.buffer = self.buffer[j + 1:].lstrip()
                self._in_args = True
                progressed = True
                continue
            fragment, done = self._scan_args()
            if fragment:
                pieces.append(ToolCallDeltaPiece(self.num_calls, arguments=fragment))
            if done:
                end = self.buffer.find(CALL_CLOSE)
                if end < 0:
                    break
                self.buffer = self.buffer[end + len(CALL_CLOSE):]
                self._in_call = False
                self.num_calls += 1
                progressed = True
        return pieces

    def _start_call(self) -> None:
        self._in_call = True
        self._name_sent = False
        self._in_args = False
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._args_started = False

    def _try_name(self) -> str | None:
        i = self.buffer.find(self._NAME_KEY)
        if i < 0:
            return None
        j = self.buffer.find(":", i + len(self._NAME_KEY))
        if j < 0:
            return None
        k = j + 1
        while k < len(self.buffer) and self.buffer[k].isspace():
            k += 1
        try:
            name, end = json.JSONDecoder().raw_decode(self.buffer, k)
        except json.JSONDecodeError:
            return None
        if not isinstance(name, str):
            return None
        # Keep anything after the name (e.g. ',"arguments":') in the buffer.
        self.buffer = self.buffer[end:]
        return name

    def _scan_args(self) -> tuple[str, bool]:
        """Consume argument text from the buffer; returns (fragment, arguments complete)."""
        out = []
        consumed = 0
        done = False
        for ch in self.buffer:
            if self._args_started and self._depth == 0 and not self._in_string:
                done = True
                break
            consumed += 1
            out.append(ch)
            if not self._args_started:
                if ch.isspace():
                    out.pop()
                    continue
                self._args_started = True
                if ch in "{[":
                    self._depth = 1
                elif ch == '"':
                    self._in_string = True
                continue
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
        else:
            if self._args_started and self._depth == 0 and not self._in_string:
                done = True
        self.buffer = self.buffer[consumed:]
        return "".join(out), done
