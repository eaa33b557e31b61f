"""A user's list of trigger -> constraint pairs (SamplingParams.triggers, `gen(triggers=...)`):
validation, the canonical text the cache keys on, and the automaton (see triggered.py)."""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.byte_nfa import ByteNFA
from sgrun.constrain.errors import InvalidSchemaError
from sgrun.constrain.json_schema import SchemaCompiler
from sgrun.constrain.regex_ast import Node, literal_choices
from sgrun.constrain.regex_parser import parse_regex
from sgrun.constrain.triggered import triggered_node

CONSTRAINT_KEYS = ("json_schema", "regex", "choices")


def checked_triggers(triggers: Any) -> list[dict[str, Any]]:
    """Each item: {"trigger": non-empty str, exactly one of json_schema / regex / choices}."""
    if not isinstance(triggers, (list, tuple)) or not triggers:
        raise InvalidSchemaError("triggers must be a non-empty list of {\"trigger\": ..., <constraint>: ...}")
    out = []
    for i, item in enumerate(triggers):
        if not isinstance(item, dict) or not isinstance(item.get("trigger"), str) or not item["trigger"]:
            raise InvalidSchemaError(f"triggers[{i}] needs a non-empty string 'trigger'")
        unknown = sorted(set(item) - {"trigger", *CONSTRAINT_KEYS})
        if unknown:
            raise InvalidSchemaError(f"triggers[{i}] has unknown key {unknown[0]!r}; use trigger and one of "
                                     f"{', '.join(CONSTRAINT_KEYS)} (grammars cannot be triggered)")
        kinds = [k for k in CONSTRAINT_KEYS if item.get(k) is not None]
        if len(kinds) != 1:
            raise InvalidSchemaError(f"triggers[{i}] needs exactly one of {', '.join(CONSTRAINT_KEYS)}")
        if kinds[0] == "choices" and (not isinstance(item["choices"], list) or not item["choices"]
                                      or not all(isinstance(c, str) for c in item["choices"])):
            raise InvalidSchemaError(f"triggers[{i}].choices must be a non-empty list of strings")
        if kinds[0] == "regex" and not isinstance(item["regex"], str):
            raise InvalidSchemaError(f"triggers[{i}].regex must be a string")
        out.append(item)
    if len({t["trigger"] for t in out}) != len(out):
        raise InvalidSchemaError("triggers must be distinct")
    return out


def canonical_triggers(triggers: Any) -> str:
    items = checked_triggers(triggers)
    return json.dumps(items, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _node(item: dict[str, Any], nfa: ByteNFA, whitespace: str) -> Node:
    if item.get("json_schema") is not None:
        schema = item["json_schema"]
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise InvalidSchemaError(f"trigger {item['trigger']!r}: json_schema is not valid JSON: {e}") from None
        return ("call", SchemaCompiler({} if schema is True else schema, whitespace=whitespace, nfa=nfa).compile_root())
    if item.get("regex") is not None:
        return parse_regex(item["regex"]).fullmatch_node()
    return literal_choices(list(item["choices"]))


def triggers_nfa(triggers: Any, whitespace: str = "compact") -> tuple[ByteNFA, int]:
    items = checked_triggers(triggers)
    nfa = ByteNFA()
    root = nfa.new_fragment()
    nfa.define_fragment(root, triggered_node([(t["trigger"], _node(t, nfa, whitespace)) for t in items]))
    return nfa, root
