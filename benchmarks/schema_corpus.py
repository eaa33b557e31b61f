"""A generated MaskBench-style sample of SchemaStore-style schemas, with valid and invalid instances.

Written for sgrun (no schema here comes from elsewhere): each schema is built from seeded random
choices modelled on the shapes of real configuration and API schemas: descriptions and defaults
everywhere, enums, nested objects, arrays of objects, $defs with $ref, anyOf of $refs, oneOf with
type or const discriminators, allOf of a $ref plus properties, anchored and unanchored patterns,
known and unknown formats, int64 bounds, additionalProperties false, patternProperties, string
length bounds up to 4096. Instances: one valid instance generated from the schema (keys in
`properties` order, compact), plus mutations of it; each is labelled by `jsonschema` (formats
checked), so the labels are the reference, not the generator's intent.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import jsonschema

WORDS = ["name", "version", "enabled", "path", "url", "timeout", "retries", "mode", "level", "tags", "items",
         "author", "license", "port", "host", "env", "rules", "output", "include", "exclude", "id", "count",
         "description", "scripts", "options", "target", "format", "email", "created", "steps", "image"]
FORMATS_KNOWN = ["date", "date-time", "email", "uri", "uuid", "ipv4", "hostname"]
FORMATS_UNKNOWN = ["semver", "path", "uri-template", "regex", "color", "byte"]
FORMAT_VALUES = {"date": "2024-02-29", "date-time": "2024-05-01T10:00:00Z", "email": "ada@example.org",
                 "uri": "https://example.org/x", "uuid": "123e4567-e89b-12d3-a456-426614174000", "ipv4": "10.0.0.1",
                 "hostname": "example.org", "semver": "1.2.3", "path": "/usr/bin", "uri-template": "/a/{b}",
                 "regex": "^a+$", "color": "#ff0000", "byte": "aGVsbG8="}
PATTERNS = [("^[a-z][a-z0-9-]*$", "my-app"), ("^v?[0-9]+\\.[0-9]+\\.[0-9]+$", "1.2.3"), ("[0-9]{3}", "abc123"),
            ("^[A-Z]{2,3}-[0-9]{4}$", "AB-1234"), ("@", "a@b"), ("^\\$\\{.+\\}$", "${HOME}"), ("\\.json$", "x.json"),
            ("^[^\\s]+$", "token")]


@dataclass
class Case:
    name: str
    schema: dict
    valid: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)


class _Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.defs: dict[str, Any] = {}

    def words(self, n: int) -> list[str]:
        return self.r.sample(WORDS, n)

    def leaf(self, depth: int) -> tuple[dict, Any]:
        r = self.r
        k = r.choice(["string", "string", "string", "integer", "number", "boolean", "enum", "format", "pattern",
                      "nullable", "array", "object", "ref", "anyof", "oneof", "const", "long", "string",
                      "integer", "enum", "boolean"])
        if r.random() < 0.03:
            k = "int64"
        if depth >= 3 and k in ("array", "object", "ref", "anyof", "oneof"):
            k = "string"
        desc = {"description": f"The {r.choice(WORDS)} setting.", "default": None} if r.random() < 0.5 else {}
        desc = {a: b for a, b in desc.items() if b is not None}
        if k == "string":
            return {"type": "string", **desc}, r.choice(["hello", "a b c", "x", ""])
        if k == "long":
            n = r.choice([256, 1024, 2048, 4096])
            return {"type": "string", "maxLength": n, **desc}, "short text"
        if k == "integer":
            lo = r.choice([0, 1, -10])
            return {"type": "integer", "minimum": lo, "maximum": lo + r.choice([10, 100, 65535]), **desc}, lo + 3
        if k == "int64":
            return {"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807}, 42
        if k == "number":
            return {"type": "number", **desc}, r.choice([0.5, 3, -2.25])
        if k == "boolean":
            return {"type": "boolean", **desc}, r.random() < 0.5
        if k == "enum":
            vals = r.sample(["auto", "always", "never", "debug", "info", "warn", "error"], 3)
            return {"enum": vals, **desc}, vals[1]
        if k == "const":
            return {"const": "v1"}, "v1"
        if k == "format":
            fmt = r.choice(FORMATS_KNOWN + FORMATS_UNKNOWN)
            return {"type": "string", "format": fmt, **desc}, FORMAT_VALUES[fmt]
        if k == "pattern":
            p, v = r.choice(PATTERNS)
            return {"type": "string", "pattern": p, **desc}, v
        if k == "nullable":
            return {"type": ["string", "null"], **desc}, None
        if k == "array":
            item, v = self.leaf(depth + 1)
            s = {"type": "array", "items": item, **desc}
            if r.random() < 0.3:
                s["minItems"] = 1
            return s, [v, v] if v is not None or "null" in str(item.get("type")) else [v]
        if k == "object":
            return self.obj(depth + 1)
        if k == "ref":
            name = f"def{len(self.defs)}"
            s, v = self.obj(depth + 1)
            self.defs[name] = s
            return {"$ref": f"#/$defs/{name}", **desc}, v
        if k == "anyof":
            a, va = self.obj(depth + 1)
            name = f"def{len(self.defs)}"
            self.defs[name] = a
            return {"anyOf": [{"$ref": f"#/$defs/{name}"}, {"type": "string"}], **desc}, va
        # oneOf with a const discriminator
        a, va = self.obj(depth + 1)
        b, _ = self.obj(depth + 1)
        a = {**a, "properties": {"kind": {"const": "a"}, **a.get("properties", {})},
             "required": ["kind"] + list(a.get("required", []))}
        b = {**b, "properties": {"kind": {"const": "b"}, **b.get("properties", {})},
             "required": ["kind"] + list(b.get("required", []))}
        return {"oneOf": [a, b]}, {"kind": "a", **va}

    def obj(self, depth: int, closed_ok: bool = True) -> tuple[dict, dict]:
        r = self.r
        names = self.words(r.randint(1, 6 if depth < 2 else 3))
        props, value = {}, {}
        for n in names:
            s, v = self.leaf(depth)
            props[n] = s
            value[n] = v
        required = [n for n in names if r.random() < 0.5]
        s: dict = {"type": "object", "properties": props}
        if required:
            s["required"] = required
        if closed_ok and r.random() < 0.4:
            s["additionalProperties"] = False
        elif r.random() < 0.1:
            s["patternProperties"] = {"^x-": {}}
        return s, value


def _serialize(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _mutations(r: random.Random, value: Any) -> list[Any]:
    out = []
    if isinstance(value, dict) and value:
        k = r.choice(list(value))
        out.append({**value, k: {"unexpected": [1, 2]}})
        out.append({kk: vv for kk, vv in value.items() if kk != k})
        out.append({**value, "zzz_extra": 1})
        out.append({**value, k: 10 ** 20})
    out.append([value])
    out.append("not an object")
    return out


def generate(n: int = 150, seed: int = 0) -> list[Case]:
    cases: list[Case] = []
    validator_cls = jsonschema.Draft202012Validator
    i = 0
    while len(cases) < n:
        i += 1
        g = _Gen(seed * 100_000 + i)
        merged = g.r.random() < 0.2  # allOf of a $ref plus the schema's own properties, declared first
        schema, value = g.obj(0, closed_ok=not merged)
        if merged:
            base, bvalue = g.obj(2, closed_ok=False)
            g.defs["base"] = base
            schema = {"allOf": [{"$ref": "#/$defs/base"}], **schema}
            value = {**bvalue, **{k: v for k, v in value.items() if k not in bvalue}}
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": f"config {i}", **schema}
        if g.defs:
            schema["$defs"] = g.defs
        v = validator_cls(schema, format_checker=validator_cls.FORMAT_CHECKER)
        case = Case(f"gen{i:03d}", schema)
        for inst in [value] + _mutations(g.r, value):
            (case.valid if v.is_valid(inst) else case.invalid).append(_serialize(inst))
        if case.valid:  # a schema no instance satisfies tells nothing about the engines
            cases.append(case)
    return cases
