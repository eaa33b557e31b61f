"""What a tool call's arguments may look like: only the properties a tool declares unless its schema
says otherwise (constrain/tool_calls/closed_objects.py), json.dumps' spacing or compact (the spacing
models are trained on), and JSON Schema's `whitespace="spaced"` meaning exactly that."""

from __future__ import annotations

import pytest

from sgrun.constrain import compile_constraint
from sgrun.constrain.tool_calls import ToolCallConstraint, ToolSpec
from sgrun.constrain.tool_calls.closed_objects import closed_parameters

SEARCH = {"type": "object", "properties": {"query": {"type": "string", "maxLength": 60}}, "required": ["query"]}


def test_closes_declared_objects_at_every_depth():
    schema = {"type": "object", "properties": {
        "where": {"type": "object", "properties": {"city": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
        "maybe": {"anyOf": [{"$ref": "#/$defs/Addr"}, {"type": "null"}]}},
        "$defs": {"Addr": {"type": "object", "properties": {"street": {"type": "string"}}}}}
    got = closed_parameters(schema)
    assert got["additionalProperties"] is False
    assert got["properties"]["where"]["additionalProperties"] is False
    assert got["properties"]["tags"]["items"]["additionalProperties"] is False
    assert got["$defs"]["Addr"]["additionalProperties"] is False
    assert "additionalProperties" not in schema   # the caller's schema is not changed


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {}}, "additionalProperties": True},
    {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
    {"type": "object", "properties": {"a": {}}, "patternProperties": {"^x": {}}},
])
def test_keeps_what_the_schema_says_about_other_keys(schema):
    assert closed_parameters(schema) == schema


@pytest.mark.parametrize("schema", [
    {"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]},
    {"type": "object", "properties": {"kind": {}}, "oneOf": [{"properties": {"kind": {"const": "x"}, "x": {}}}]},
    {"type": "object", "properties": {"a": {}}, "if": {"required": ["a"]}, "then": {"properties": {"b": {}}}},
    {"type": "object", "properties": {"a": {}}, "dependentSchemas": {"a": {"properties": {"b": {}}}}},
])
def test_leaves_combined_object_parts_as_written(schema):
    """Closing one part of a combination could forbid a key another part declares."""
    assert closed_parameters(schema) == schema


def test_a_call_holds_no_undeclared_argument(tokenizer):
    c = compile_constraint(tokenizer, tool_calls=ToolCallConstraint("hermes", (ToolSpec("search", SEARCH),),
                                                                    "required", parallel=False))
    ok = '<tool_call>{"name": "search", "arguments": {"query": "lyon weather"}}</tool_call>'
    assert c.matches(ok)
    assert c.matches('<tool_call>{"name":"search","arguments":{"query":"lyon weather"}}</tool_call>')
    assert not c.matches('<tool_call>{"name": "search", "arguments": {"query": "c", "type": "string"}}</tool_call>')
    opened = {**SEARCH, "additionalProperties": True}
    c = compile_constraint(tokenizer, tool_calls=ToolCallConstraint("hermes", (ToolSpec("search", opened),),
                                                                    "required", parallel=False))
    assert c.matches('<tool_call>{"name": "search", "arguments": {"query": "c", "type": "string"}}</tool_call>')


def test_spaced_json_is_json_dumps_spacing_only(tokenizer):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array"}}}
    c = compile_constraint(tokenizer, json_schema=schema, whitespace="spaced")
    for text in ('{"a": 1, "b": [1, 2]}', '{"a":1,"b":[1,2]}'):
        assert c.matches(text), text
    for text in ('{ "a": 1}', '{"a" : 1}', '{"a": 1 }', '{"a": 1, "b": [ 1]}'):
        assert not c.matches(text), text
