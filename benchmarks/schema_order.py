"""Instances serialized the way the JSON Schema compiler emits them: object keys in the order the
governing schemas declare them (the compiler's key order), the other keys after in their own
order. Shared by the constraint tests and benchmarks/audit_constraints.py."""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.json_schema import canonical_numbers  # the compiler's canonical numbers


class SchemaOrder:
    """Reorders instance keys the way the compiler emits them: the keys the governing schemas
    list under `properties` first (schema order), then the others in their original order."""

    def __init__(self, root: Any):
        from sgrun.constrain.schema_refs import SchemaIndex
        self.index = SchemaIndex(root)
        self.root = root

    def _expand(self, schema: Any, base: str, depth: int = 0) -> list[tuple[dict, str]]:
        if not isinstance(schema, dict) or depth > 20:
            return []
        base = self.index.base_for(schema, base)
        # merged parts come where they are declared relative to the schema's own `properties`
        out = [] if "properties" in schema else [(schema, base)]
        for key, value in schema.items():
            if key == "properties":
                out.append((schema, base))
            elif key == "$ref" and isinstance(value, str):
                try:
                    target, _, tbase = self.index.resolve(value, base, "#")
                    out += self._expand(target, tbase, depth + 1)
                except Exception:
                    pass
            elif key in ("allOf", "anyOf", "oneOf") and isinstance(value, list):
                for sub in value:
                    out += self._expand(sub, base, depth + 1)
        return out

    def order(self, value: Any) -> Any:
        """`value` with its objects' keys in the compiler's order (numbers as they are)."""
        return self._order(value, [(self.root, "https://sgrun.invalid/root.json")])

    def serialize(self, value: Any) -> str:
        """Compact, integral floats as integers (the compiler's canonical form)."""
        return json.dumps(self.order(canonical_numbers(value)), separators=(",", ":"), ensure_ascii=False)

    def _order(self, value: Any, schemas: list[tuple[Any, str]]) -> Any:
        flat = [x for s, b in schemas for x in self._expand(s, b)]
        if isinstance(value, dict):
            declared: list[str] = []
            for s, _ in flat:
                props = s.get("properties")
                if isinstance(props, dict):
                    declared += [k for k in props if k not in declared]
            keys = [k for k in declared if k in value] + [k for k in value if k not in declared]
            out = {}
            for k in keys:
                child = []
                for s, b in flat:
                    props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
                    if k in props:
                        child.append((props[k], b))
                    for p, sub in (s.get("patternProperties") or {}).items():
                        child.append((sub, b))
                    if isinstance(s.get("additionalProperties"), dict):
                        child.append((s["additionalProperties"], b))
                out[k] = self._order(value[k], child)
            return out
        if isinstance(value, list):
            out_list = []
            for i, v in enumerate(value):
                child = []
                for s, b in flat:
                    pre = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else (
                        s.get("items") if isinstance(s.get("items"), list) else [])
                    if i < len(pre):
                        child.append((pre[i], b))
                    elif isinstance(s.get("items"), dict):
                        child.append((s["items"], b))
                out_list.append(self._order(v, child))
            return out_list
        return value
