"""The `{"name": "<tool>", "<args_key>": {...}}` object that the JSON call formats (Hermes, Mistral,
Llama 3) write: its constraint and its text, kept together so a rendered turn is exactly what the
constraint would have let the model write."""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.regex_ast import Node, alt, lit, opt, seq
from sgrun.constrain.tool_calls.tool_arguments import ToolArguments
from sgrun.constrain.tool_calls.tool_spec import arguments_object

# A space after `:` and `,` may be written or not. Models are trained on json.dumps' default
# spacing (`{"name": "get_weather", "arguments": {...}}`, as the tool prompts show it): held to the
# compact form, SmolLM2 put -4.1 on `":"` where it wanted `":` (-0.02), and its choice of tool
# after that forced token became a near tie between the tools.
SPACE = opt(lit(" "))


def json_call_node(tools: list[ToolArguments], args_key: str) -> Node:
    """`{"name": "<tool>", "<args_key>": <that tool's arguments>}`, one branch per tool."""
    return alt(*(seq(lit('{"name":'), SPACE, lit(json.dumps(t.tool.name, ensure_ascii=False) + ","), SPACE,
                     lit(f'"{args_key}":'), SPACE, t.json_node(), lit("}")) for t in tools))


def json_call_text(name: str, args: Any, args_key: str) -> str:
    """The call object `json_call_node` accepts, spaced as json.dumps spaces it, for a client's
    (name, arguments)."""
    return f'{{"name": {json.dumps(name, ensure_ascii=False)}, "{args_key}": {arguments_json(args)}}}'


def arguments_json(args: Any) -> str:
    """A call's arguments as JSON text (json.dumps' spacing); arguments text that is not JSON stays
    as sent (a bad turn from the client is re-rendered, not rewritten)."""
    value = arguments_object(args) if isinstance(args, str) else args
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
