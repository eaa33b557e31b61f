"""Structural tags (SGLang's / vLLM's / xgrammar's `response_format: {"type": "structural_tag"}`):
free text with constrained segments that a trigger opens, compiled into ONE automaton.

Two shapes are accepted, as the peers accept them:

- the original one: {"structures": [{"begin", "schema", "end"}], "triggers": [...]}: free text
  until a trigger appears; the trigger is the start of the `begin` of one or more structures,
  whose rest, then a JSON value of its `schema`, then its `end` follow; then free text again,
  any number of times;
- the newer one: {"format": <format>}, a format being one of const_string {value},
  json_schema {json_schema}, regex {pattern}, any_text {excluded_str}, sequence {elements},
  or {elements}, tag {begin, content, end}, triggered_tags {triggers, tags, at_least_one,
  stop_after_first}, tags_with_separator {tags, separator, at_least_one, stop_after_first}.

Free text is "bytes in which no trigger occurs" (triggered.py's Aho-Corasick automaton), so a
token that straddles a trigger is masked exactly, and every part shares the one lazy DFA. A
malformed shape is an InvalidSchemaError naming the field path (a 400 on the server).
"""

from __future__ import annotations

import json
from typing import Any

from sgrun.constrain.byte_nfa import ByteNFA
from sgrun.constrain.errors import InvalidSchemaError
from sgrun.constrain.json_schema import SchemaCompiler
from sgrun.constrain.regex_ast import MAX_CODEPOINT, Node, alt, chars, lit, opt, rep, seq
from sgrun.constrain.regex_parser import parse_regex
from sgrun.constrain.triggered import trigger_dfas

FORMAT_TYPES = ("const_string", "json_schema", "regex", "any_text", "sequence", "or", "tag", "triggered_tags",
                "tags_with_separator")
MAX_FORMAT_DEPTH = 32


def canonical_structural_tag(tag: Any) -> str:
    """The text the constraint cache keys on (checked first, so a bad shape fails here)."""
    return json.dumps(checked_structural_tag(tag), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def checked_structural_tag(tag: Any) -> dict[str, Any]:
    """The structural tag (parsed when given as JSON text), its shape checked."""
    if isinstance(tag, str):
        try:
            tag = json.loads(tag)
        except json.JSONDecodeError as e:
            raise InvalidSchemaError(f"structural_tag is not valid JSON: {e}") from None
    if not isinstance(tag, dict):
        raise InvalidSchemaError("structural_tag must be an object with 'format', or 'structures' and 'triggers'")
    rest = sorted(set(tag) - {"type", "format", "structures", "triggers"})
    if rest:
        raise InvalidSchemaError(f"structural_tag has unknown field {rest[0]!r}; use 'format', or 'structures' "
                                 f"and 'triggers'")
    if tag.get("type", "structural_tag") != "structural_tag":
        raise InvalidSchemaError(f"structural_tag.type must be 'structural_tag', got {tag.get('type')!r}")
    if "format" in tag:
        if "structures" in tag or "triggers" in tag:
            raise InvalidSchemaError("structural_tag: give either 'format' or 'structures' with 'triggers', not both")
        _check_format(tag["format"], "format", 0)
        return tag
    structures, triggers = tag.get("structures"), tag.get("triggers")
    if not isinstance(structures, list) or not structures:
        raise InvalidSchemaError("structural_tag.structures must be a non-empty list of {begin, schema, end}")
    for i, s in enumerate(structures):
        where = f"structures[{i}]"
        if not isinstance(s, dict):
            raise InvalidSchemaError(f"structural_tag.{where} must be an object with begin, schema and end")
        unknown = sorted(set(s) - {"begin", "schema", "end"})
        if unknown:
            raise InvalidSchemaError(f"structural_tag.{where} has unknown field {unknown[0]!r}; use begin, schema, end")
        for key in ("begin", "end"):
            if not isinstance(s.get(key), str):
                raise InvalidSchemaError(f"structural_tag.{where}.{key} must be a string")
        if not s["begin"]:
            raise InvalidSchemaError(f"structural_tag.{where}.begin must not be empty")
        if "schema" not in s or not isinstance(s["schema"], (dict, bool, str)):
            raise InvalidSchemaError(f"structural_tag.{where}.schema must be a JSON Schema (object or JSON text)")
    _check_triggers(triggers, [s["begin"] for s in structures], "structural_tag.triggers", "structural_tag.structures")
    return tag


def _check_triggers(triggers: Any, begins: list[str], where: str, tags_where: str) -> None:
    if not isinstance(triggers, list) or not triggers or not all(isinstance(t, str) and t for t in triggers):
        raise InvalidSchemaError(f"{where} must be a non-empty list of non-empty strings")
    if len(set(triggers)) != len(triggers):
        raise InvalidSchemaError(f"{where} must be distinct")
    for i, b in enumerate(begins):
        owners = [t for t in triggers if b.startswith(t)]
        if len(owners) != 1:
            why = "no trigger starts" if not owners else f"{len(owners)} triggers start"
            raise InvalidSchemaError(f"{tags_where}[{i}].begin {b!r}: {why} it; each begin must start with "
                                     f"exactly one of the triggers")


def _check_format(fmt: Any, where: str, depth: int) -> None:
    if depth > MAX_FORMAT_DEPTH:
        raise InvalidSchemaError(f"structural_tag.{where}: formats nest more than {MAX_FORMAT_DEPTH} deep")
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise InvalidSchemaError(f"structural_tag.{where} must be an object with a 'type' (one of "
                                 f"{', '.join(FORMAT_TYPES)})")
    kind = fmt["type"]
    if kind not in FORMAT_TYPES:
        hint = " (grammars cannot be embedded: use regex or json_schema)" if kind == "grammar" else ""
        raise InvalidSchemaError(f"structural_tag.{where}.type {kind!r} is not supported{hint}; use one of "
                                 f"{', '.join(FORMAT_TYPES)}")
    fields = {"const_string": {"value"}, "json_schema": {"json_schema", "style"}, "regex": {"pattern"},
              "any_text": {"excluded_str"}, "sequence": {"elements"}, "or": {"elements"},
              "tag": {"begin", "content", "end"},
              "triggered_tags": {"triggers", "tags", "at_least_one", "stop_after_first", "excludes"},
              "tags_with_separator": {"tags", "separator", "at_least_one", "stop_after_first"}}[kind]
    unknown = sorted(set(fmt) - fields - {"type"})
    if unknown:
        raise InvalidSchemaError(f"structural_tag.{where} ({kind}) has unknown field {unknown[0]!r}; "
                                 f"it takes {', '.join(sorted(fields))}")

    def need(key: str, types: tuple, what: str) -> Any:
        if key not in fmt or not isinstance(fmt[key], types) or isinstance(fmt[key], bool) and bool not in types:
            raise InvalidSchemaError(f"structural_tag.{where}.{key} must be {what}")
        return fmt[key]

    if kind == "const_string":
        if not need("value", (str,), "a non-empty string"):
            raise InvalidSchemaError(f"structural_tag.{where}.value must be a non-empty string")
    elif kind == "json_schema":
        need("json_schema", (dict, bool, str), "a JSON Schema (object or JSON text)")
    elif kind == "regex":
        need("pattern", (str,), "a regular expression string")
    elif kind == "any_text":
        ex = fmt.get("excluded_str", [])
        if not isinstance(ex, list) or not all(isinstance(s, str) and s for s in ex):
            raise InvalidSchemaError(f"structural_tag.{where}.excluded_str must be a list of non-empty strings")
    elif kind in ("sequence", "or"):
        elements = need("elements", (list,), "a non-empty list of formats")
        if not elements:
            raise InvalidSchemaError(f"structural_tag.{where}.elements must be a non-empty list of formats")
        for i, e in enumerate(elements):
            _check_format(e, f"{where}.elements[{i}]", depth + 1)
    elif kind == "tag":
        _check_tag(fmt, where, depth)
    else:
        tags = need("tags", (list,), "a non-empty list of tags")
        if not tags:
            raise InvalidSchemaError(f"structural_tag.{where}.tags must be a non-empty list of tags")
        for i, t in enumerate(tags):
            _check_tag(t, f"{where}.tags[{i}]", depth)
        for key in ("at_least_one", "stop_after_first"):
            if not isinstance(fmt.get(key, False), bool):
                raise InvalidSchemaError(f"structural_tag.{where}.{key} must be true or false")
        if kind == "triggered_tags":
            _check_triggers(fmt.get("triggers"), [t["begin"] for t in tags], f"structural_tag.{where}.triggers",
                            f"structural_tag.{where}.tags")
            ex = fmt.get("excludes", [])
            if not isinstance(ex, list) or not all(isinstance(s, str) and s for s in ex):
                raise InvalidSchemaError(f"structural_tag.{where}.excludes must be a list of non-empty strings")
        else:
            need("separator", (str,), "a string")


def _check_tag(tag: Any, where: str, depth: int) -> None:
    if not isinstance(tag, dict):
        raise InvalidSchemaError(f"structural_tag.{where} must be a tag object {{begin, content, end}}")
    unknown = sorted(set(tag) - {"type", "begin", "content", "end"})
    if unknown or tag.get("type", "tag") != "tag":
        raise InvalidSchemaError(f"structural_tag.{where} must be a tag: {{\"begin\", \"content\", \"end\"}}"
                                 + (f" (unknown field {unknown[0]!r})" if unknown else ""))
    for key in ("begin", "end"):
        if not isinstance(tag.get(key), str):
            raise InvalidSchemaError(f"structural_tag.{where}.{key} must be a string")
    if "content" not in tag:
        raise InvalidSchemaError(f"structural_tag.{where}.content is required (a format)")
    _check_format(tag["content"], f"{where}.content", depth + 1)


class _Builder:
    """Format objects -> regex_ast nodes over one ByteNFA (JSON Schemas as called fragments)."""

    def __init__(self, nfa: ByteNFA, whitespace: str):
        self.nfa = nfa
        self.whitespace = whitespace

    def schema(self, schema: Any, where: str) -> Node:
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise InvalidSchemaError(f"structural_tag.{where} is not valid JSON: {e}") from None
        compiler = SchemaCompiler({} if schema is True else schema, whitespace=self.whitespace, nfa=self.nfa)
        return ("call", compiler.compile_root())

    def format(self, fmt: dict[str, Any], where: str) -> Node:
        kind = fmt["type"]
        if kind == "const_string":
            return lit(fmt["value"])
        if kind == "json_schema":
            return self.schema(fmt["json_schema"], f"{where}.json_schema")
        if kind == "regex":
            return parse_regex(fmt["pattern"]).fullmatch_node()
        if kind == "any_text":
            return _text_without(list(fmt.get("excluded_str", [])))
        if kind == "sequence":
            return seq(*(self.format(e, f"{where}.elements[{i}]") for i, e in enumerate(fmt["elements"])))
        if kind == "or":
            return alt(*(self.format(e, f"{where}.elements[{i}]") for i, e in enumerate(fmt["elements"])))
        if kind == "tag":
            return self.tag(fmt, where)
        tags = [self.tag(t, f"{where}.tags[{i}]") for i, t in enumerate(fmt["tags"])]
        first, once = fmt.get("at_least_one", False), fmt.get("stop_after_first", False)
        if kind == "tags_with_separator":
            one = alt(*tags)
            if once:
                return one if first else opt(one)
            many = seq(one, rep(seq(lit(fmt["separator"]), one), 0, None))
            return many if first else opt(many)
        # triggered_tags: free text (no trigger, no excluded string), a trigger opens a tag.
        bodies = [self.tag(t, f"{where}.tags[{i}]", skip=_owner(fmt["triggers"], t["begin"]))
                  for i, t in enumerate(fmt["tags"])]
        looped = _triggered_loop(fmt["triggers"], fmt["tags"], bodies, list(fmt.get("excludes", [])), once)
        if first:   # the first tag opens the output, as xgrammar does; `once`: and it is all
            return alt(*tags) if once else seq(alt(*tags), looped)
        return looped

    def tag(self, tag: dict[str, Any], where: str, skip: str = "") -> Node:
        """begin (less its first `skip` characters: the trigger already read), content, end. Free
        text as the content runs to the first `end` (xgrammar's special case)."""
        begin, content, end = tag["begin"][len(skip):], tag["content"], tag["end"]
        if content["type"] == "any_text" and end:
            return seq(lit(begin), _text_then(end, list(content.get("excluded_str", []))))
        return seq(lit(begin), self.format(content, f"{where}.content"), lit(end))


def _owner(triggers: list[str], begin: str) -> str:
    return next(t for t in triggers if begin.startswith(t))


def _text_without(excluded: list[str]) -> Node:
    """Any text in which none of `excluded` occurs."""
    if not excluded:
        return rep(chars((0, MAX_CODEPOINT)), 0, None)
    free, _ = trigger_dfas(list(dict.fromkeys(excluded)))
    return ("dfa", free)


def _text_then(end: str, excluded: list[str]) -> Node:
    """Text up to the first occurrence of `end`, `end` included, with no excluded string
    before it (so the tag closes at the first `end`, exactly)."""
    stops = list(dict.fromkeys([end] + [e for e in excluded if e != end]))
    _, found = trigger_dfas(stops)
    return ("dfa", found[0])


def _triggered_loop(triggers: list[str], tags: list[dict], bodies: list[Node], excludes: list[str],
                    once: bool) -> Node:
    """Free text where trigger i opens one of its tags' bodies; after a tag, free text again
    (once: the output ends after the first tag's end)."""
    stops = list(dict.fromkeys(triggers + [e for e in excludes if e not in triggers]))
    free, found = trigger_dfas(stops)
    parts = []
    for i, trig in enumerate(triggers):
        mine = [b for t, b in zip(tags, bodies) if _owner(triggers, t["begin"]) == trig]
        parts.append(seq(("dfa", found[stops.index(trig)]), alt(*mine)))
    opened = alt(*parts)
    if once:
        return alt(("dfa", free), opened)
    return seq(rep(opened, 0, None), ("dfa", free))


def legacy_as_format(tag: dict[str, Any]) -> dict[str, Any]:
    """The original shape as a `triggered_tags` format (the two compile alike)."""
    return {"type": "triggered_tags", "triggers": list(tag["triggers"]),
            "tags": [{"begin": s["begin"], "content": {"type": "json_schema", "json_schema": s["schema"]},
                      "end": s["end"]} for s in tag["structures"]]}


def structural_tag_nfa(tag: Any, whitespace: str = "compact") -> tuple[ByteNFA, int]:
    checked = checked_structural_tag(tag)
    fmt = checked["format"] if "format" in checked else legacy_as_format(checked)
    nfa = ByteNFA()
    root = nfa.new_fragment()
    nfa.define_fragment(root, _Builder(nfa, whitespace).format(fmt, "format" if "format" in checked else "structures"))
    return nfa, root

