"""Exact rewrites of keywords the automaton has no direct construction for into allOf/anyOf of
schemas it does build (each rewrite has the same set of valid instances):

- dependentRequired / dependentSchemas / draft-4 dependencies: per trigger property, one
  branch where it is present (and its dependency holds) and one where it is absent;
- `not` of schemas whose complement is a positive schema (types, scalar const / enum,
  required / property-const tests as used for discriminators, and anyOf / allOf / not of
  those), via De Morgan;
- if / then / else as (if AND then) OR (not-if AND else), not-if such a complement where one
  exists, else a `not` the compiler builds as an automaton complement (exactly_one).

What cannot be rewritten exactly is left in place (the compiler then refuses it, or loosens it
with a warning under lenient).
"""

from __future__ import annotations

from typing import Any

ALL_TYPES = ("null", "boolean", "object", "array", "number", "string")
_ANNOTATION_KEYS = frozenset({"title", "description", "$comment", "examples", "default", "deprecated", "readOnly",
                              "writeOnly", "$id", "$schema", "$anchor", "markdownDescription", "errorMessage"})


def _core(s: dict) -> dict:
    return {k: v for k, v in s.items() if k not in _ANNOTATION_KEYS and not k.startswith("x-")}


def dependency_parts(s: dict) -> list[Any]:
    """Pop dependentRequired / dependentSchemas / dependencies from `s`; return the allOf parts
    that enforce them (each an anyOf of 'trigger present + dependency' / 'trigger absent')."""
    parts: list[Any] = []
    deps: list[tuple[str, Any]] = []
    for key in ("dependentRequired", "dependentSchemas", "dependencies"):
        d = s.pop(key, None)
        if isinstance(d, dict):
            deps.extend(d.items())
    for trigger, dep in deps:
        if dep is True or dep == [] or dep == {}:
            continue
        # (dependencies before their trigger: required keys that `properties` does not order are
        # emitted in this order, and instances tend to name what they depend on first)
        present: dict = {"required": (list(dep) if isinstance(dep, list) else []) + [trigger]}
        if not isinstance(dep, list):
            present["allOf"] = [dep]
        parts.append({"anyOf": [present, {"properties": {trigger: False}}]})
    return parts


def negate(schema: Any) -> Any | None:
    """A positive schema whose valid instances are exactly those `schema` rejects, or None."""
    if schema is True:
        return False
    if schema is False:
        return True
    if not isinstance(schema, dict):
        return None
    s = _core(schema)
    if not s:
        return False
    if set(s) == {"not"}:
        return s["not"]
    if set(s) == {"anyOf"} and isinstance(s["anyOf"], list):
        parts = [negate(x) for x in s["anyOf"]]
        return None if any(p is None for p in parts) else {"allOf": parts}
    if set(s) == {"allOf"} and isinstance(s["allOf"], list):
        parts = [negate(x) for x in s["allOf"]]
        return None if any(p is None for p in parts) else {"anyOf": parts}
    if set(s) == {"type"}:
        ts = [s["type"]] if isinstance(s["type"], str) else list(s["type"])
        if "integer" in ts and "number" not in ts:
            return None  # the complement holds non-integral numbers: not a type list
        rest = [t for t in ALL_TYPES if t not in ts]
        return {"type": rest} if rest else False
    if set(s) in ({"const"}, {"enum"}) and isinstance(s.get("enum", []), list) \
            and not any(isinstance(v, (list, dict)) for v in s.get("enum", [s.get("const")])):
        return {"not": s}  # the compiler subtracts scalar values from each type
    for typ, bounds in _BOUNDS.items():
        if s and set(s) - {"type"} and set(s) <= {"type"} | set(bounds) and s.get("type", typ) in (typ, [typ]) \
                and all(isinstance(s[k], (int, float)) and not isinstance(s[k], bool) for k in s if k != "type"):
            # not (T within bounds) = another type, or T beyond one of the bounds
            branches = [{"type": [t for t in ALL_TYPES if t != typ]}] if "type" in s else []
            for k in s:
                if k != "type":
                    opposite = _opposite(typ, k, s[k])
                    if opposite is None:
                        return None
                    if opposite >= 0:
                        branches.append({"type": typ, bounds[k]: opposite})
            return {"anyOf": branches} if branches else False
    if set(s) <= {"required", "properties", "type"} and s.get("type", "object") in ("object", ["object"]):
        return _negate_object_test(s)
    return None


# For each type, its bound keywords and the keyword that states the opposite bound (length and
# count bounds are integers: the opposite of maxLength n is minLength n + 1, see _opposite).
_BOUNDS = {
    "number": {"minimum": "exclusiveMaximum", "maximum": "exclusiveMinimum", "exclusiveMinimum": "maximum",
               "exclusiveMaximum": "minimum"},
    "string": {"minLength": "maxLength", "maxLength": "minLength"},
    "array": {"minItems": "maxItems", "maxItems": "minItems"},
}


def _opposite(typ: str, key: str, value: int | float) -> int | float | None:
    """The bound that holds exactly where `key: value` fails (-1: nowhere; None: not an integer
    length)."""
    if typ == "number":
        return value
    if value != int(value):
        return None
    return int(value) - 1 if key.startswith("min") else int(value) + 1


def _negate_object_test(s: dict) -> Any | None:
    """not (object with these required keys, whose listed properties pass their sub-schemas):
    a missing required key, or a present property whose value fails its (negatable) schema."""
    required = s.get("required", [])
    props = s.get("properties", {})
    if not isinstance(required, list) or not isinstance(props, dict):
        return None
    # required / properties say nothing about non-objects: those fail the test only when it
    # also says type: object
    branches: list[Any] = [{"type": [t for t in ALL_TYPES if t != "object"]}] if "type" in s else []
    for r in required:
        branches.append({"type": "object", "properties": {r: False}})
    for name, sub in props.items():
        if sub is True or sub == {}:
            continue
        neg = negate(sub)  # the property is present and its value fails `sub`
        if neg is None:
            return None
        if neg is not False:
            branches.append({"type": "object", "required": [name], "properties": {name: neg}})
    return {"anyOf": branches} if branches else False


def conditional_part(s: dict) -> Any | None:
    """Pop if/then/else from `s`; the allOf part enforcing them (None: no `if`)."""
    if "if" not in s:
        return None
    cond, then, other = s["if"], s.get("then", True), s.get("else", True)
    if then is True and other is True:
        for k in ("if", "then", "else"):
            s.pop(k, None)
        return True
    neg = negate(cond)
    if neg is None:
        # no positive complement: `not` of the condition, built as an exact complement by the
        # compiler (exactly_one) or refused there by name
        neg = {"not": cond}
    for k in ("if", "then", "else"):
        s.pop(k, None)
    return {"anyOf": [{"allOf": [cond, then]}, {"allOf": [neg, other]}]}
