"""Keyword value checks for one schema object, and nesting limits for a whole document.

A JSON Schema whose keywords have the wrong value type (`"required": 7`, `"minLength": -1`,
`"maxLength": "5"`) is not a schema at all: it gets an InvalidSchemaError naming the keyword and
its location, never a TypeError from deep inside the compiler.
"""

from __future__ import annotations

from typing import Any

from sgrun.constrain.errors import ConstraintTooComplexError, InvalidSchemaError

MAX_DOCUMENT_DEPTH = 256   # nested JSON objects/arrays in the schema text
MAX_SCHEMA_NESTING = 100   # nested sub-schemas a value must go through (the generated JSON's depth)

_NON_NEGATIVE_INTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
                      "minContains", "maxContains")
_NUMBERS = ("minimum", "maximum")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_SINGLE = ("additionalProperties", "additionalItems", "not", "if", "then", "else", "contains",
                  "propertyNames", "unevaluatedProperties", "unevaluatedItems")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
TYPE_NAMES = ("null", "boolean", "object", "array", "number", "string", "integer")


class NestingTooDeepError(ConstraintTooComplexError):
    """The schema (or its generated values) nests deeper than the limit."""


def _is_schema(v: Any) -> bool:
    return isinstance(v, (dict, bool))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_keywords(s: dict, ptr: str) -> None:
    """Raise InvalidSchemaError for the first keyword of `s` whose value has the wrong type."""
    def bad(key: str, want: str) -> InvalidSchemaError:
        return InvalidSchemaError(f"JSON Schema keyword {key!r} at {ptr} must be {want}, not {s[key]!r:.60}")

    for key in _NON_NEGATIVE_INTS:
        if key in s:
            v = s[key]
            if not _is_number(v) or v < 0 or (isinstance(v, float) and not v.is_integer()):
                raise bad(key, "a non-negative integer")
            if isinstance(v, float):
                s[key] = int(v)
    for key in _NUMBERS:
        if key in s and not _is_number(s[key]):
            raise bad(key, "a number")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in s and not (_is_number(s[key]) or isinstance(s[key], bool)):
            raise bad(key, "a number")
    if "multipleOf" in s and (not _is_number(s["multipleOf"]) or s["multipleOf"] <= 0):
        raise bad("multipleOf", "a number greater than 0")
    if "required" in s:
        r = s["required"]
        if not isinstance(r, list) or not all(isinstance(x, str) for x in r):
            raise bad("required", "a list of property-name strings")
    if "type" in s:
        t = s["type"]
        ts = [t] if isinstance(t, str) else t
        if not isinstance(ts, list) or not ts or not all(isinstance(x, str) and x in TYPE_NAMES for x in ts):
            raise bad("type", f"one of {', '.join(TYPE_NAMES)} or a list of them")
    if "enum" in s and not isinstance(s["enum"], list):
        raise bad("enum", "a list")
    for key in ("pattern", "format"):
        if key in s and not isinstance(s[key], str):
            raise bad(key, "a string")
    if "uniqueItems" in s and not isinstance(s["uniqueItems"], bool):
        raise bad("uniqueItems", "true or false")
    for key in _SCHEMA_MAPS:
        if key in s and (not isinstance(s[key], dict) or not all(_is_schema(v) for v in s[key].values())):
            raise bad(key, "an object whose values are schemas")
    for key in _SCHEMA_SINGLE:
        if key in s and not _is_schema(s[key]):
            raise bad(key, "a schema (an object or a boolean)")
    for key in _SCHEMA_LISTS:
        if key in s and (not isinstance(s[key], list) or not all(_is_schema(v) for v in s[key])
                         or (key != "prefixItems" and not s[key])):
            raise bad(key, "a non-empty list of schemas" if key != "prefixItems" else "a list of schemas")
    if "items" in s:
        it = s["items"]
        if not (_is_schema(it) or (isinstance(it, list) and all(_is_schema(v) for v in it))):
            raise bad("items", "a schema or a list of schemas")
    if "dependentRequired" in s:
        d = s["dependentRequired"]
        if not isinstance(d, dict) or not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                                              for v in d.values()):
            raise bad("dependentRequired", "an object whose values are lists of property names")
    if "dependencies" in s:
        d = s["dependencies"]
        if not isinstance(d, dict) or not all(_is_schema(v) or (isinstance(v, list) and all(isinstance(x, str) for x in v))
                                              for v in d.values()):
            raise bad("dependencies", "an object whose values are schemas or lists of property names")
    if "$ref" in s and not isinstance(s["$ref"], str):
        raise bad("$ref", "a string")


def check_document_depth(doc: Any, limit: int = MAX_DOCUMENT_DEPTH) -> None:
    """Iterative (no recursion) depth check of the raw schema document."""
    todo: list[tuple[Any, int]] = [(doc, 1)]
    while todo:
        node, depth = todo.pop()
        if depth > limit:
            raise NestingTooDeepError(f"the JSON schema nests more than {limit} objects/arrays deep (the limit); "
                                      f"flatten it or move repeated parts into $defs")
        if isinstance(node, dict):
            todo.extend((v, depth + 1) for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            todo.extend((v, depth + 1) for v in node if isinstance(v, (dict, list)))
