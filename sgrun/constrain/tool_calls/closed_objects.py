"""Tool arguments get the properties their schema declares, and no others, unless it says otherwise.

JSON Schema lets an object without `additionalProperties` hold any other key. A small model offered
that freedom fills it with the schema's own words: SmolLM2 called `search({"query": "c", "type":
"string", "maxLength": "60", "required": "city"})`. No tool wants undeclared arguments it never
named, and llama.cpp's and xgrammar's tool grammars (strict mode) close such objects as well. So,
for tool parameters only (response_format keeps JSON Schema's meaning exactly):

- an object schema that declares `properties` and says nothing about other keys
  (`additionalProperties`, `patternProperties`, `unevaluatedProperties`) gets
  `additionalProperties: false`; `additionalProperties: true` or a schema keeps other keys open;
- where closing one part could forbid a key another part declares, nothing is closed: a schema that
  combines object parts (`allOf`, `if`, `dependentSchemas`, `not`, `$dynamicRef`,
  `unevaluatedProperties` anywhere, or `anyOf`/`oneOf` branches that declare properties or refer
  elsewhere beside properties of their own) is compiled as written.
"""

from __future__ import annotations

import copy
from typing import Any

# Keywords under which closing one object part could forbid what another part declares.
_COMBINING = frozenset({"allOf", "if", "dependentSchemas", "not", "$dynamicRef", "unevaluatedProperties"})
_OPEN_KEYWORDS = ("additionalProperties", "patternProperties", "unevaluatedProperties")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties", "contains", "propertyNames")


def closed_parameters(schema: Any) -> Any:
    """`schema` with its objects closed as the module docstring says (a copy; `schema` itself when
    nothing may be closed)."""
    if not isinstance(schema, dict) or not _closable(schema):
        return schema
    out = copy.deepcopy(schema)
    _close(out)
    return out


def _closable(s: Any) -> bool:
    if isinstance(s, list):
        return all(_closable(x) for x in s)
    if not isinstance(s, dict):
        return True
    if _COMBINING & s.keys():
        return False
    for key in ("anyOf", "oneOf"):
        branches = s.get(key)
        if isinstance(branches, list) and "properties" in s and any(
                isinstance(b, dict) and ("properties" in b or "$ref" in b) for b in branches):
            return False
    return all(_closable(v) for v in _children(s))


def _close(s: Any) -> None:
    if not isinstance(s, dict):
        return
    if isinstance(s.get("properties"), dict) and not any(k in s for k in _OPEN_KEYWORDS):
        s["additionalProperties"] = False
    for child in _children(s):
        _close(child)


def _children(s: dict) -> list[Any]:
    out: list[Any] = []
    for key in _SUBSCHEMA_MAPS:
        if isinstance(s.get(key), dict):
            out += list(s[key].values())
    for key in _SUBSCHEMA_LISTS:
        if isinstance(s.get(key), list):
            out += s[key]
    for key in _SUBSCHEMAS:
        if isinstance(s.get(key), (dict, list)):
            out += s[key] if isinstance(s[key], list) else [s[key]]
    return out
