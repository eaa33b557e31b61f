"""Hand-written cases for the keyword families sgrun used to refuse and now enforces exactly
(issue 55, part 1) and for key_order="any" (part 3): oneOf whose branches overlap, `not` of
objects and arrays, if/then/else whose condition has no positive complement, uniqueItems over
objects and arrays, min/maxProperties above 64, and objects whose properties come in any order.

Each family is a list of FamilyCase: a schema written here for the construct, the key order it
is compiled with, valid and invalid instances (labelled by hand; the tests check every label
against `jsonschema`), and, for what stays refused, the keyword the refusal must name. The audit
(audit_constraints.py) runs them as one row per family; tests/test_constrain_exact_families.py
also walks the masks along each instance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FamilyCase:
    name: str
    schema: Any
    valid: list[Any] = field(default_factory=list)
    invalid: list[Any] = field(default_factory=list)
    key_order: str = "schema"
    refused: str | None = None  # the keyword a refusal names (the instances then count as refused)


def _tag_object(pattern_branch: dict, short_branch: dict) -> dict:
    return {"type": "object", "oneOf": [pattern_branch, short_branch]}


ONE_OF = [
    FamilyCase("number or integer, not both",
               {"oneOf": [{"type": "number"}, {"type": "integer"}]},
               valid=[1.5, -0.25, 1e-3], invalid=[3, 0, -7, "x", None]),
    FamilyCase("short string or prefixed string",
               {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "string", "pattern": "^ab"}]},
               valid=["xyz", "", "abcd", "ab-long"], invalid=["ab", "abc", "wxyz", 12]),
    FamilyCase("open objects told apart by a pattern and a length",
               _tag_object({"properties": {"tag": {"type": "string", "pattern": "^x"}}, "required": ["tag"]},
                           {"properties": {"tag": {"type": "string", "maxLength": 2}}}),
               valid=[{"tag": "xyz"}, {"tag": "ab"}, {}, {"other": [1, {"x": 2}]}, {"tag": "xyz", "n": [None]}],
               invalid=[{"tag": "xy"}, {"tag": "x", "n": 1}, {"tag": "abc"}, 5, []]),
    FamilyCase("any value or an integer array",
               {"oneOf": [{}, {"type": "array", "items": {"type": "integer"}}]},
               valid=["s", ["a"], [[1]], {"k": [1]}, 2.5, None], invalid=[[], [1, 2], [-3]]),
    FamilyCase("a $ref and an overlapping integer branch",
               {"$defs": {"natural": {"type": "integer", "minimum": 0}},
                "oneOf": [{"$ref": "#/$defs/natural"}, {"type": "integer", "multipleOf": 2}]},
               valid=[3, 7, -2, -10], invalid=[4, 0, -3, 1.5, "4"]),
    FamilyCase("closed records with overlapping enums",
               {"oneOf": [
                   {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
                    "required": ["kind"], "additionalProperties": False},
                   {"type": "object", "properties": {"kind": {"enum": ["b", "c"]}, "n": {"type": "integer",
                                                                                         "maximum": 9}},
                    "required": ["kind", "n"], "additionalProperties": False}]},
               valid=[{"kind": "a"}, {"kind": "a", "n": 50}, {"kind": "b"}, {"kind": "b", "n": 10},
                      {"kind": "c", "n": 3}],
               invalid=[{"kind": "b", "n": 3}, {"kind": "c"}, {"kind": "d", "n": 1}, {"kind": "c", "n": 10}]),
    FamilyCase("a recursive tree against arrays of any arrays",
               {"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}},
                "oneOf": [{"$ref": "#/$defs/t"}, {"type": "array", "items": {"type": "array"}}]},
               valid=[[[1]], [[[], 2]]], invalid=[[], [[]], 1], refused="oneOf"),
]

NOT = [
    FamilyCase("integer arrays with some item above 5",
               {"type": "array", "items": {"type": "integer"}, "not": {"items": {"maximum": 5}}},
               valid=[[6], [1, 9], [7, 7, 7]], invalid=[[], [1, 2], [5], ["a"], 6]),
    FamilyCase("anything but a closed record",
               {"not": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}},
               valid=[1, "s", {"a": 1}, {"b": "x"}, [1, {"a": "x"}], None],
               invalid=[{}, {"a": "x"}]),
    FamilyCase("short arrays that are not a permutation of 1..3 values",
               {"type": "array", "maxItems": 3, "not": {"uniqueItems": True, "items": {"enum": [1, 2, 3]}}},
               valid=[[1, 1], [4], ["a"], [2, 3, 2]], invalid=[[], [1, 2], [3, 1, 2], [1, 1, 1, 1]]),
    FamilyCase("objects other than two listed values",
               {"type": "object", "not": {"enum": [{"a": 1}, {"b": 2}]}},
               valid=[{}, {"a": 2}, {"a": 1, "b": 2}, {"b": [2]}], invalid=[{"a": 1}, {"b": 2}, {"b": 2.0}]),
]

IF_THEN_ELSE = [
    FamilyCase("a condition on a pattern",
               {"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
                "additionalProperties": False,
                "if": {"properties": {"id": {"pattern": "^x"}}, "required": ["id"]},
                "then": {"required": ["n"]}, "else": {"properties": {"n": {"maximum": 3}}}},
               valid=[{"id": "xa", "n": 5}, {"id": "ya", "n": 2}, {"n": 1}, {}],
               invalid=[{"id": "xa"}, {"id": "ya", "n": 5}, {"n": 9}, {"id": 3}]),
    FamilyCase("a condition on array items",
               {"if": {"type": "array", "items": {"type": "integer"}}, "then": {"maxItems": 2},
                "else": {"type": ["array", "string"]}},
               valid=[[1], [], ["a", "b", "c"], "s", [1, "a", 2]], invalid=[[1, 2, 3], 3, {}, None]),
    FamilyCase("digits limited in length, other strings at least two",
               {"type": "string", "if": {"pattern": "^[0-9]+$"}, "then": {"maxLength": 4}, "else": {"minLength": 2}},
               valid=["123", "ab", "1234", "1a"], invalid=["12345", "a", "", 12]),
]

UNIQUE_ITEMS = [
    FamilyCase("distinct small records",
               {"type": "array", "uniqueItems": True,
                "items": {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"enum": [1, 2]}},
                          "required": ["a"], "additionalProperties": False}},
               valid=[[], [{"a": True}], [{"a": True}, {"a": False, "b": 1}], [{"a": True, "b": 1}, {"a": True}]],
               invalid=[[{"a": True}, {"a": True}], [{"a": True, "b": 1}, {"b": 1, "a": True}], [{"a": 1}],
                        [{"a": False, "b": 2}, {"a": True}, {"a": False, "b": 2}]]),
    FamilyCase("distinct short arrays",
               {"type": "array", "uniqueItems": True,
                "items": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2}},
               valid=[[[], ["x"]], [["x", "y"], ["y", "x"]], [["x", "x"], ["x"]]],
               invalid=[[["x"], ["x"]], [[], []], [["z"]], [["y", "x"], [], ["y", "x"]]]),
    FamilyCase("distinct strings of a finite pattern",
               {"type": "array", "uniqueItems": True, "items": {"type": "string", "pattern": "^[ab]{1,2}$"}},
               valid=[["a", "b"], ["ab", "ba", "aa", "bb"], []], invalid=[["a", "a"], ["ab", "ab"], ["c"]]),
    FamilyCase("distinct values, each position its own",
               {"type": "array", "uniqueItems": True, "prefixItems": [{"enum": ["a", "b"]}, {"type": "boolean"}],
                "items": {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"],
                          "additionalProperties": False}},
               valid=[["a"], ["b", True, {"k": "a"}, {"k": "b"}], ["a", False]],
               invalid=[["b", True, {"k": "a"}, {"k": "a"}], [True], ["a", "b"], ["a", True, {"k": "c"}]]),
    FamilyCase("distinct open objects: refused by name",
               {"type": "array", "uniqueItems": True, "items": {"type": "object"}},
               valid=[[{}, {"a": 1}]], invalid=[[{}, {}]], refused="uniqueItems"),
]


def _keys(n: int, prefix: str = "k") -> dict:
    return {f"{prefix}{i}": i for i in range(n)}


PROPERTY_COUNTS = [
    FamilyCase("at most 100 additional integers",
               {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 100},
               valid=[{}, {"a": 1}, _keys(100)], invalid=[_keys(101), {"a": "x"}]),
    FamilyCase("at least 70 of 80 declared",
               {"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(80)},
                "additionalProperties": False, "minProperties": 70},
               valid=[_keys(70), _keys(80)], invalid=[_keys(69), {}, _keys(10)]),
    FamilyCase("between 65 and 66 declared",
               {"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(90)},
                "additionalProperties": False, "minProperties": 65, "maxProperties": 66},
               valid=[_keys(65), _keys(66)], invalid=[_keys(64), _keys(67), _keys(90)]),
    FamilyCase("a count past the state budget: refused by name",
               {"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(400)},
                "additionalProperties": False, "maxProperties": 390},
               valid=[_keys(390)], invalid=[_keys(391)], refused="maxProperties"),
]

KEY_ORDER_ANY = [
    FamilyCase("a tool's arguments in the model's order",
               {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]},
                                                 "days": {"type": "integer", "minimum": 1}},
                "required": ["city"], "additionalProperties": False},
               valid=[{"unit": "c", "city": "Oslo"}, {"days": 2, "unit": "f", "city": "Lima"}, {"city": "Rome"},
                      {"city": "Kyiv", "days": 3}],
               invalid=[{"unit": "c"}, {"unit": "k", "city": "x"}, {"days": 0, "city": "x"}, {"x": 1, "city": "y"}],
               key_order="any"),
    FamilyCase("required keys and additional ones between them",
               {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                "required": ["a", "b"]},
               valid=[{"b": "x", "z": None, "a": 1}, {"z": 1, "a": 1, "b": "y"}, {"a": 1, "b": "y", "q": [1]}],
               invalid=[{"b": "x", "z": 1}, {"b": 1, "a": 1}, {}],
               key_order="any"),
    FamilyCase("counted properties in any order",
               {"type": "object", "properties": {"p": {"type": "null"}, "q": {"type": "null"}, "r": {"type": "null"}},
                "additionalProperties": False, "minProperties": 2},
               valid=[{"r": None, "p": None}, {"q": None, "r": None, "p": None}],
               invalid=[{"q": None}, {}, {"p": None, "q": 1}],
               key_order="any"),
    FamilyCase("eleven properties in any order: refused by name",
               {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(11)}},
               valid=[{"p3": 1, "p0": 2}], invalid=[{"p3": "x"}], key_order="any", refused="properties"),
]

FAMILIES: dict[str, list[FamilyCase]] = {
    "oneOf-overlapping": ONE_OF,
    "not-object-array": NOT,
    "if-then-else": IF_THEN_ELSE,
    "uniqueItems-containers": UNIQUE_ITEMS,
    "property-counts-above-64": PROPERTY_COUNTS,
    "key-order-any": KEY_ORDER_ANY,
}
