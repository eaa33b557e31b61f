"""allOf: merging object-shaped schema dicts into one (intersection semantics), so properties
from several parts are generated as one object. Keywords we cannot merge exactly are refused."""

from __future__ import annotations

import json
from typing import Any, Callable

from sgrun.constrain.errors import UnsupportedSchemaError

# Keywords with validation meaning; any other key is an annotation and merges by keeping one value.
VALIDATION_KEYWORDS = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties", "items",
    "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength",
    "pattern", "$sgrun_patterns", "$sgrun_exclude", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "minProperties", "maxProperties", "not", "propertyNames", "contains",
    "minContains", "maxContains", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
    "unevaluatedProperties", "unevaluatedItems",
})
_MAX_KEYS = ("maximum", "maxLength", "maxItems", "maxProperties")
_MIN_KEYS = ("minimum", "minLength", "minItems", "minProperties")
_TYPE_ORDER = ("null", "boolean", "object", "array", "number", "string", "integer")


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _types(s: dict) -> set[str] | None:
    t = s.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def merge_types(a: set[str] | None, b: set[str] | None) -> set[str] | None:
    if a is None:
        return b
    if b is None:
        return a
    out = a & b
    if "integer" in a and "number" in b or "integer" in b and "number" in a:
        out.add("integer")
    return out


Refuse = Callable[..., None]


def _strict(keyword: str, ptr: str, reason: str, s: dict | None = None) -> None:
    raise UnsupportedSchemaError(keyword, ptr, reason)


def merge_schemas(a: dict, b: dict, ptr: str, pattern_matches: Callable[[str, str], bool],
                  refuse: Refuse = _strict) -> dict:
    """Intersection of two schema dicts without $ref/allOf/anyOf/oneOf at their top level.

    What cannot be intersected exactly goes to `refuse(keyword, ptr, reason)`, which raises, or
    (lenient) records a warning; the merge then keeps the first part's value (a looser schema).
    Keywords without validation meaning (annotations, vendor `x-...` keys) never conflict."""
    if "$sgrun_call" in a or "$sgrun_call" in b:  # a call ignores sibling keywords: never merge one
        raise AssertionError("internal: a $ref call placeholder reached an allOf merge")
    if "$sgrun_one_of" in a or "$sgrun_one_of" in b:
        # "exactly one of B_i" AND c = "exactly one of (B_i AND c)": c goes into every branch
        # (two such: exactly one of the pairs, which holds exactly when each holds)
        x, other, first = (a, b, False) if "$sgrun_one_of" in a else (b, a, True)
        branches, one_ptr, keyword = x["$sgrun_one_of"]
        merged = [[merge_schemas(other, d, ptr, pattern_matches, refuse) if first else
                   merge_schemas(d, other, ptr, pattern_matches, refuse) for d in br] for br in branches]
        return {"$sgrun_one_of": (merged, one_ptr, keyword)}
    _ANN = ("title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly",
            "$schema", "$id", "$defs", "definitions", "$anchor")
    for x, y in ((a, b), (b, a)):
        for k in ("unevaluatedProperties", "unevaluatedItems"):
            if k in x and any(key not in _ANN and key in VALIDATION_KEYWORDS for key in y):
                refuse(k, ptr, f"{k} combined with applicators (allOf/anyOf/oneOf/$ref) is not supported")
    out = dict(a)
    array_keys = ("items", "prefixItems", "additionalItems")
    if any(k in a for k in array_keys) and any(k in b for k in array_keys):
        _merge_arrays(a, b, out)
    for key, bv in b.items():
        if key in array_keys and any(k in a for k in array_keys):
            continue
        if key not in out:
            out[key] = bv
            continue
        av = out[key]
        if canonical(av) == canonical(bv) and key not in ("additionalProperties", "patternProperties", "properties"):
            continue
        if key == "type":
            t = merge_types(_types(a), _types(b))
            out["type"] = sorted(t, key=_TYPE_ORDER.index)
        elif key in _MAX_KEYS:
            out[key] = min(av, bv)
        elif key in _MIN_KEYS:
            out[key] = max(av, bv)
        elif key == "exclusiveMaximum" and not isinstance(av, bool) and not isinstance(bv, bool):
            out[key] = min(av, bv)
        elif key == "exclusiveMinimum" and not isinstance(av, bool) and not isinstance(bv, bool):
            out[key] = max(av, bv)
        elif key == "required":
            out[key] = list(dict.fromkeys(list(av) + list(bv)))
        elif key in ("enum", "const"):
            pass  # intersected together below
        elif key == "pattern":
            out["pattern"] = av
            out.setdefault("$sgrun_patterns", []).append(bv)
        elif key == "$sgrun_patterns":
            out[key] = list(av) + list(bv)
        elif key == "multipleOf" and isinstance(av, int) and isinstance(bv, int):
            from math import lcm
            out[key] = lcm(av, bv)
        elif key == "uniqueItems":
            out[key] = bool(av) or bool(bv)
        elif key in ("properties", "patternProperties", "additionalProperties"):
            pass  # handled together below
        elif key == "items" and isinstance(av, (dict, bool)) and isinstance(bv, (dict, bool)):
            out[key] = _all_of(av, bv)
        elif key not in VALIDATION_KEYWORDS or key in _ANN:
            pass  # annotations (and unknown keys, which JSON Schema treats as annotations)
        elif key == "not":
            out[key] = {"anyOf": [av, bv]}
        elif key == "$sgrun_exclude":
            out[key] = list(av) + list(bv)
        elif key in ("dependentRequired", "dependentSchemas", "dependencies") and isinstance(av, dict) \
                and isinstance(bv, dict):
            out[key] = _merge_dependencies(av, bv)
        else:
            refuse("allOf", ptr, f"cannot merge differing {key!r} values (lenient: the first one is kept)")
    if any(k in a or k in b for k in ("properties", "patternProperties", "additionalProperties")):
        _merge_objects(a, b, out, ptr, pattern_matches, refuse)
    _intersect_values(a, b, out)
    return out


def _intersect_values(a: dict, b: dict, out: dict) -> None:
    """const/enum of both parts: one enum of the values every list allows (in a's order)."""
    lists = [[s["const"]] if k == "const" else list(s["enum"]) for s in (a, b) for k in ("const", "enum") if k in s]
    if len(lists) < 2:
        return
    keep = lists[0]
    for other in lists[1:]:
        allowed = {value_key(x) for x in other}
        keep = [x for x in keep if value_key(x) in allowed]
    out.pop("const", None)
    out["enum"] = keep


def value_key(v: Any) -> str:
    """Equality key of a JSON value (JSON Schema: 1 == 1.0, true != 1, key order irrelevant)."""
    return canonical(_integral(v))


def _integral(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, list):
        return [_integral(x) for x in v]
    if isinstance(v, dict):
        return {k: _integral(x) for k, x in v.items()}
    return v


def _merge_dependencies(a: dict, b: dict) -> dict:
    """Both parts' dependencies hold: per trigger property, the union of required names, or
    the allOf of dependent schemas."""
    out = dict(a)
    for k, v in b.items():
        if k not in out:
            out[k] = v
        elif isinstance(out[k], list) and isinstance(v, list):
            out[k] = list(dict.fromkeys(out[k] + v))
        else:
            x = {"required": out[k]} if isinstance(out[k], list) else out[k]
            y = {"required": v} if isinstance(v, list) else v
            out[k] = _all_of(x, y)
    return out


def _array_parts(s: dict) -> tuple[list, Any]:
    if isinstance(s.get("items"), list):
        return list(s["items"]), s.get("additionalItems", True)
    return list(s.get("prefixItems", [])), s.get("items", True)


def _merge_arrays(a: dict, b: dict, out: dict) -> None:
    """Position-wise intersection: an `items` without prefixItems constrains every element."""
    (ap, ar), (bp, br) = _array_parts(a), _array_parts(b)
    n = max(len(ap), len(bp))
    prefix = [_all_of(ap[i] if i < len(ap) else ar, bp[i] if i < len(bp) else br) for i in range(n)]
    for k in ("items", "prefixItems", "additionalItems"):
        out.pop(k, None)
    if prefix:
        out["prefixItems"] = prefix
    rest = _all_of(ar, br)
    if rest is not True:
        out["items"] = rest


def _all_of(x: Any, y: Any) -> Any:
    if x is True or x == {}:
        return y
    if y is True or y == {}:
        return x
    if x is False or y is False:
        return False
    return {"allOf": [x, y]}


def _value_schema(s: dict, name: str, pattern_matches: Callable[[str, str], bool]) -> Any:
    """What schema `s` requires of the value of property `name`."""
    props = s.get("properties", {})
    parts = []
    if name in props:
        parts.append(props[name])
    matched = [v for p, v in s.get("patternProperties", {}).items() if pattern_matches(p, name)]
    parts.extend(matched)
    if name not in props and not matched:
        parts.append(s.get("additionalProperties", True))
    out: Any = True
    for p in parts:
        out = _all_of(out, p)
    return out


def _merge_objects(a: dict, b: dict, out: dict, ptr: str, pattern_matches: Callable[[str, str], bool],
                   refuse: Refuse) -> None:
    a_pat, b_pat = a.get("patternProperties", {}), b.get("patternProperties", {})
    a_add, b_add = a.get("additionalProperties", True), b.get("additionalProperties", True)
    names = list(dict.fromkeys(list(a.get("properties", {})) + list(b.get("properties", {}))))
    props = {n: _all_of(_value_schema(a, n, pattern_matches), _value_schema(b, n, pattern_matches)) for n in names}
    if props:
        out["properties"] = props
    else:
        out.pop("properties", None)
    if a_pat and b_pat and canonical(a_pat) != canonical(b_pat):
        refuse("allOf", ptr, "cannot merge two different patternProperties (lenient: both kept, as a union)")
        a_pat = {**b_pat, **a_pat}
    if (a_pat and b_add not in (True, {})) or (b_pat and a_add not in (True, {})):
        refuse("allOf", ptr, "cannot merge patternProperties with another additionalProperties "
                             "(lenient: additionalProperties dropped)")
        a_add = b_add = True
    pat = a_pat or b_pat
    if pat:
        out["patternProperties"] = pat
    else:
        out.pop("patternProperties", None)
    add = _all_of(a_add, b_add)
    if add is True:
        out.pop("additionalProperties", None)
    else:
        out["additionalProperties"] = add
