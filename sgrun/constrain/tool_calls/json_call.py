"""The `{"name": "<tool>", "<args_key>": {...}}` object that the JSON call formats (Hermes, Mistral,
Llama 3) write: its constraint and its text, kept together so a rendered turn is exactly what the
constraint would have let the model write."""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.regex_ast import Node, alt, lit, seq
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments
from sgrun.constrain.tool_calls.tool_spec import arguments_object, compact_json


def json_call_node(tools: list[ToolArguments], args_key: str) -> Node:
    """`{"name":"<tool>","<args_key>":<that tool's arguments>}`, one branch per tool."""
    return alt(*(seq(lit('{"name":' + json.dumps(t.tool.name, ensure_ascii=False) + f',"{args_key}":'),
                     t.json_node(), lit("}")) for t in tools))


def json_call_text(name: str, args: Any, args_key: str) -> str:
    """The compact call object `json_call_node` accepts, for a client's (name, arguments)."""
    return f'{{"name":{json.dumps(name, ensure_ascii=False)},"{args_key}":{arguments_json(args)}}}'


def arguments_json(args: Any) -> str:
    """A call's arguments as compact JSON text; arguments text that is not JSON stays as sent (a bad
    turn from the client is re-rendered, not rewritten)."""
    value = arguments_object(args) if isinstance(args, str) else args
    return value if isinstance(value, str) else compact_json(value)
