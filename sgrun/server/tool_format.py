"""The tool-call format: how tool definitions reach a model whose chat template cannot render
them, the constraint that makes calls well-formed, and parsing whole generated text back into
calls. This module is the seam for call formats: chat.py and chat_stream.py use only
`default_tools_block`, `render_call`, `tool_call_regex`, `parameter_schema_specs`,
`parse_tool_calls` and (streaming) tool_stream_parser.StreamingToolParser.

The call format is `<tool_call>{"name":"f","arguments":{...}}</tool_call>` (Hermes / Qwen
style), one per call, separated by a newline. Calls are generated as compact JSON so that
an assistant turn sent back by the client renders to exactly the tokens the model produced."""

from __future__ import annotations

import json
import secrets

from outlines_core.json_schema import build_regex_from_schema

from sgrun.server.constraint_compile import ConstraintSpec
from sgrun.server.errors import APIError
from sgrun.server.protocol import FunctionCall, ToolCall, ToolDef
from sgrun.server.tool_plan import ToolPlan, tool_json

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
CALL_SEPARATOR = "\n"

# Generated JSON is compact; no free whitespace lets a small model ramble.
_WHITESPACE = ""


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


def parameter_schema_specs(tools: list[ToolDef]) -> list[ConstraintSpec]:
    """Each tool's parameters schema as a constraint to compile with sgrun's own JSON Schema
    compiler (cached), so an unsupported keyword is a 400 naming the keyword, its path and the
    tool, exactly as for response_format."""
    return [ConstraintSpec("json_schema", t.function.parameters, f"tools[{i}].function.parameters")
            for i, t in enumerate(tools) if t.function.parameters is not None]


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
