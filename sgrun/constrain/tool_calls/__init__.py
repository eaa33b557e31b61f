"""Tool calls, one implementation for the server and `sgrun.Agent`: for each model family's call
format the prompting text, the constraint (each tool's parameters a sub-automaton compiled by
sgrun's JSON Schema compiler), whole and incremental parsing, and re-rendering an assistant turn
that carries tool_calls. Pure: imports nothing above `sgrun.constrain`."""

from sgrun.constrain.tool_calls.call_constraint import ToolCallConstraint
from sgrun.constrain.tool_calls.call_format import CallFormat
from sgrun.constrain.tool_calls.registry import DEFAULT_FORMAT, FORMATS, detect_format, get_format
from sgrun.constrain.tool_calls.streaming import StreamingCallParser
from sgrun.constrain.tool_calls.tool_spec import (CallDelta, CallsParse, ParsedCall, PartialCall, ToolSchemaError,
                                                  ToolSpec, arguments_object, new_call_id)

__all__ = ["ToolCallConstraint", "CallFormat", "FORMATS", "DEFAULT_FORMAT", "detect_format", "get_format",
           "StreamingCallParser", "CallDelta", "CallsParse", "ParsedCall", "PartialCall", "ToolSchemaError", "ToolSpec",
           "arguments_object", "new_call_id"]
