"""JSON Schema -> byte NFA with calls (see byte_nfa). Each distinct sub-schema becomes one
fragment, compiled once and entered by a call edge wherever it is used, so $ref recursion works
to any depth the runtime stack allows (lazy_dfa.DEFAULT_MAX_DEPTH nested calls) and big schemas
stay linear in size. Leaves (strings with pattern/format, bounded numbers) are small eager DFAs.

Output form: properties in schema order (then any additional properties), integers without
fraction/exponent, bounded numbers without exponent. Whitespace: "compact" by default (what the
MaskBench reference harness feeds, serde_json's compact form, and what lets jump-forward force
whole `,"key":` runs); "spaced" also accepts one space wherever JSON allows whitespace (Python
json.dumps' default `", "` / `": "`) and "flexible" any JSON whitespace (llguidance's default).
"""

from __future__ import annotations

import json
import warnings
from decimal import Decimal
from itertools import combinations
from math import comb
from typing import Any

from sgrun.constrain.byte_dfa import ByteDFA, dfa_from_node, finite_words, product
from sgrun.constrain.byte_nfa import ByteNFA
from sgrun.constrain.compile_budget import CompileBudgetExceeded
from sgrun.constrain.errors import ConstraintTooComplexError, InvalidSchemaError, UnsupportedSchemaError
from sgrun.constrain.exactly_one import Inliner, NotBuildable, exactly_one_node
from sgrun.constrain.json_string import (any_text_dfa, constrained_string_node, excluded_dfa, length_dfa,
                                         string_node)
from sgrun.constrain.numbers import (as_decimal_ratio, decimal_multiple_dfa, integer_bounds,
                                     integer_with_multiple, number_node)
from sgrun.constrain.regex_ast import EMPTY, NOTHING, Node, alt, chars, lit, opt, rep, seq
from sgrun.constrain.regex_parser import parse_regex
from sgrun.constrain.schema_checks import (MAX_SCHEMA_NESTING, NestingTooDeepError, check_document_depth,
                                           check_keywords)
from sgrun.constrain.schema_merge import merge_schemas, value_key
from sgrun.constrain.schema_rewrites import conditional_part, dependency_parts, negate
from sgrun.errors import ConstraintError
from sgrun.constrain.schema_refs import SchemaIndex
from sgrun.constrain.string_formats import KNOWN_FORMATS
from sgrun.constrain.string_leaf import format_dfa, pattern_matches, pattern_search_dfa, string_leaf

ANNOTATIONS = frozenset({
    "title", "description", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly",
    "$schema", "$id", "id", "$anchor", "$defs", "definitions", "contentMediaType", "contentEncoding",
    "contentSchema", "$vocabulary", "$dynamicAnchor", "$recursiveAnchor", "discriminator", "example",
})
ALL_TYPES = ("null", "boolean", "object", "array", "number", "string")
_ECMA_DOT_EXCLUDES = (0x0A, 0x0D, 0x2028, 0x2029)
_MAX_PATTERN_CELLS = 64  # patternProperties: key classes (which patterns a key matches)
_MAX_UNIQUE_DOMAIN = 64  # uniqueItems: distinct item values tracked (the sets of used ones must fit _MAX_UNIQUE_SETS)
_MAX_UNIQUE_SETS = 4096  # uniqueItems: sets of used values (one NFA state each)
KEY_ORDERS = ("schema", "required-first", "any")
_MAX_ANY_ORDER_SETS = 1024  # key_order="any": sets of declared properties used so far (one fragment each)
_MAX_COUNT_STATES = 200_000  # minProperties / maxProperties: estimated states of the member counter
_SHARE_COUNTED_OVER = 8  # lanes above which each counted member is one shared fragment
_MAX_EXPAND = 64
_KNOWN_DRAFTS = ("json-schema.org/draft-04/", "json-schema.org/draft-06/", "json-schema.org/draft-07/",
                 "json-schema.org/draft/2019-09/", "json-schema.org/draft/2020-12/", "json-schema.org/schema")
_MAX_PERMUTED_KEYS = 5
_LATER_THAN_4 = frozenset({"const", "contains", "propertyNames"})
_LATER_THAN_6 = frozenset({"if", "then", "else"})
_LATER_THAN_7 = frozenset({"dependentRequired", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties",
                           "minContains", "maxContains", "$recursiveRef"})
_LATER_THAN_2019 = frozenset({"prefixItems", "$dynamicRef"})
# validation keywords each declared draft lacks (jsonschema's validators for that draft ignore them)
_NOT_IN_DRAFT = {
    "4": _LATER_THAN_4 | _LATER_THAN_6 | _LATER_THAN_7 | _LATER_THAN_2019,
    "6": _LATER_THAN_6 | _LATER_THAN_7 | _LATER_THAN_2019,
    "7": _LATER_THAN_7 | _LATER_THAN_2019,
    "2019": _LATER_THAN_2019 | {"dependencies"},
    "2020": frozenset({"dependencies", "additionalItems", "$recursiveRef"}),
}


def _draft_of(uri: str) -> str | None:
    """The draft a $schema URI names ("4" ... "2020"), None for none / the unversioned latest.
    Snowplow's Iglu self-describing meta-schema extends draft-04."""
    for needle, draft in (("draft-04/", "4"), ("draft-06/", "6"), ("draft-07/", "7"), ("draft/2019-09/", "2019"),
                          ("draft/2020-12/", "2020"), ("iglucentral.com/schemas/com.snowplowanalytics.self-desc", "4")):
        if needle in uri:
            return draft
    return None
_MAX_LOOSE_REQUIRED = 3


def canonical_json(value: Any) -> str:
    """Our output form of a JSON value: compact, integral floats as integers, keys as given."""
    return json.dumps(canonical_numbers(value), separators=(",", ":"), ensure_ascii=False)


def canonical_numbers(v: Any) -> Any:
    """`v` with integral floats as ints (1.0 -> 1), the only form sgrun generates integers in."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, list):
        return [canonical_numbers(x) for x in v]
    if isinstance(v, dict):
        return {k: canonical_numbers(x) for k, x in v.items()}
    return v


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


class SchemaCompiler:
    def __init__(self, root: Any, whitespace: str = "compact", lenient: bool = False, nfa: ByteNFA | None = None,
                 key_order: str = "schema"):
        self.root = root
        self.lenient = lenient
        if key_order not in KEY_ORDERS:
            raise InvalidSchemaError(f"key_order must be one of {', '.join(map(repr, KEY_ORDERS))}, not {key_order!r}")
        self.required_first = key_order == "required-first"
        self.any_order = key_order == "any"
        self.warnings: list[str] = []  # what lenient mode dropped or loosened
        # A shared NFA lets several documents (one per tool) be sub-automata of one constraint,
        # each resolving its own $ref/$defs.
        self.nfa = nfa if nfa is not None else ByteNFA(share=True)
        self.index = SchemaIndex(root)
        draft = str(root.get("$schema", "")) if isinstance(root, dict) else ""
        if "draft-03" in draft:
            raise UnsupportedSchemaError("$schema", "#", "draft-03 schemas are not supported (its `required` and "
                                                         "`type` differ); use draft-04 or later")
        self.draft = _draft_of(draft)
        if draft and self.draft is None and not any(d in draft for d in _KNOWN_DRAFTS):
            # (a custom meta-schema may switch vocabularies off or add keywords: unknowable here)
            raise UnsupportedSchemaError("$schema", "#", f"unknown meta-schema {draft!r} (custom vocabularies "
                                                        f"are not supported; use a json-schema.org draft)")
        # Keywords the declared draft does not have are annotations there (jsonschema ignores
        # them: a draft-04 `const` or `if` validates nothing); no $schema: every draft's keywords.
        self.not_in_draft = _NOT_IN_DRAFT.get(self.draft, frozenset())
        self.legacy_ref = self.draft in ("4", "6", "7")
        self._fragments: dict[tuple[str, str], int] = {}
        self._content_keys: dict[int, str] = {}
        self._pending: list[tuple[int, Any, str, str, bool]] = []  # (fid, schema, ptr, base, any_order)
        self._draining = False
        self._keep: list[Any] = []  # keeps merged dicts alive so id() keys stay unique
        self._any_fid: int | None = None
        self._any_key_fid: int | None = None
        # `ws`: inside brackets and before `,` `:`; `ws_after`: after `,` and `:`.
        if whitespace == "compact":
            self.ws: Node = EMPTY
            self.ws_after: Node = EMPTY
        elif whitespace == "spaced":  # compact, or json.dumps' default ", " and ": " (nothing else)
            self.ws, self.ws_after = EMPTY, opt(chars((0x20, 0x20)))
        elif whitespace == "flexible":
            self.ws = self.ws_after = rep(chars((0x09, 0x0A), (0x0D, 0x0D), (0x20, 0x20)), 0, None)
        else:
            self.ws = self.ws_after = parse_regex(whitespace).fullmatch_node()

    # --- fragments ----------------------------------------------------------------------
    def compile_root(self) -> int:
        root = self.fragment(self.root, "#", self.index.base_for(self.root, "https://sgrun.invalid/root.json"))
        depth = self.nfa.longest_call_chain(root)
        if depth > MAX_SCHEMA_NESTING:
            raise NestingTooDeepError(f"the JSON schema nests values {depth} levels deep; the limit is "
                                      f"{MAX_SCHEMA_NESTING} nested objects/arrays/sub-schemas: flatten it")
        return root

    def fragment(self, schema: Any, ptr: str, base: str) -> int:
        """The fragment for `schema` (allocated now, defined later from the work list).
        Identical sub-schemas (same JSON text, same base URI) share one fragment."""
        ck = self._content_keys.get(id(schema))
        if ck is None:
            try:
                ck = json.dumps(schema, separators=(",", ":"), default=repr)
            except (TypeError, ValueError):
                ck = f"id:{id(schema)}"
            self._content_keys[id(schema)] = ck
            self._keep.append(schema)  # (alive while its id keys _content_keys: a freed id is reused)
        key = (ck, base, self.any_order)  # (exactly-one builds branches in any key order too)
        fid = self._fragments.get(key)
        if fid is not None:
            return fid
        self._keep.append(schema)
        fid = self.nfa.new_fragment()
        self._fragments[key] = fid
        self._pending.append((fid, schema, ptr, base, self.any_order))
        if not self._draining:
            # Fragments are defined from a work list by the outermost call, not recursively, so
            # schema nesting never grows the Python stack (the nesting limit is checked on the
            # finished call graph in compile_root).
            self._draining = True
            try:
                while self._pending:
                    self._define(*self._pending.pop())
            finally:
                self._draining = False
        return fid

    def call(self, schema: Any, ptr: str, base: str) -> Node:
        if schema is False:
            return NOTHING
        if schema is True or schema == {}:
            return ("call", self.any_value_fid())
        return ("call", self.fragment(schema, ptr, self.index.base_for(schema, base)))

    # --- one schema ---------------------------------------------------------------------
    def value_node(self, schema: Any, ptr: str, base: str) -> Node:
        if schema is True:
            return ("call", self.any_value_fid())
        if schema is False:
            return NOTHING
        if not isinstance(schema, dict):
            raise InvalidSchemaError(f"schema at {ptr} must be an object or a boolean, not {type(schema).__name__}")
        branches = self.expand(schema, ptr, base, 0, allow_call=True)
        if isinstance(branches, tuple):  # a bare $ref: call its target (recursion-safe)
            return branches[1]
        return alt(*(self.plain_node(s, ptr, base) for s in branches))

    def expand(self, schema: dict, ptr: str, base: str, depth: int, allow_call: bool = False) -> list[dict] | tuple:
        """Resolve $ref / allOf / anyOf / oneOf at the top of `schema` into alternatives of plain
        dicts (no applicators left at their top level), or ("call", node) for a bare $ref."""
        if depth > _MAX_EXPAND:
            raise UnsupportedSchemaError("$ref", ptr, "reference cycle without progress (infinite recursion)")
        base = self.index.base_for(schema, base)
        s = dict(schema)
        for k in self.not_in_draft.intersection(s):
            del s[k]
        check_keywords(s, ptr)
        for k in ("$dynamicRef", "$recursiveRef"):
            if k in s:
                self.refuse(k, ptr, "dynamic references are not supported", s)
        extra = self._rewrites(s)
        if extra:  # exact rewrites into applicators, appended after the schema's own keywords
            s["allOf"] = list(s.get("allOf", [])) + extra
        if "$ref" in s:
            ref = s.pop("$ref")
            if not isinstance(ref, str):
                raise InvalidSchemaError(f"$ref at {ptr} must be a string")
            target, tptr, tbase = self.index.resolve(ref, base, ptr)
            if self.legacy_ref:
                s = {}
            rest = {k: v for k, v in s.items() if k not in ANNOTATIONS}
            if not rest and allow_call:
                if target is False:
                    return [{"not": {}}]
                return ("call", self.call(target, tptr, tbase))
            if target is False:
                return []
            if target is True:
                return self._all_of([rest], [ptr], [base], depth)
            if _declared_before(schema, "$ref", "properties"):
                return self._all_of([target, rest], [tptr, ptr], [tbase, base], depth)
            return self._all_of([rest, target], [ptr, tptr], [base, tbase], depth)
        if "allOf" in s:
            parts = s.pop("allOf")
            if not isinstance(parts, list):
                raise InvalidSchemaError(f"allOf at {ptr} must be a list")
            ptrs = [f"{ptr}/allOf/{i}" for i in range(len(parts))]
            if _declared_before(schema, "allOf", "properties"):  # merged properties go where declared
                return self._all_of(parts + [s], ptrs + [ptr], [base] * (len(parts) + 1), depth)
            return self._all_of([s] + parts, [ptr] + ptrs, [base] * (len(parts) + 1), depth)
        for key in ("anyOf", "oneOf"):
            if key in s:
                branches_raw = s.pop(key)
                if not isinstance(branches_raw, list) or not branches_raw:
                    raise InvalidSchemaError(f"{key} at {ptr} must be a non-empty list")
                rest = {k: v for k, v in s.items() if k not in ANNOTATIONS}
                out: list[dict] = []
                per_branch: list[list[dict]] = []
                for i, b in enumerate(branches_raw):
                    bptr = f"{ptr}/{key}/{i}"
                    if b is False:
                        per_branch.append([])
                        continue
                    b = {} if b is True else b
                    # Only a branch that stands alone (no sibling keywords, not inside an allOf
                    # merge) may stay a call; anything merged with other keywords must be
                    # expanded, or the merge would drop those keywords (the call ignores them).
                    if rest:
                        parts2 = [b, rest] if _declared_before(schema, key, "properties") else [rest, b]
                        got = self._all_of(parts2, [bptr, ptr] if parts2[0] is b else [ptr, bptr], [base, base],
                                           depth)
                    else:
                        got = self.expand(b, bptr, base, depth + 1, allow_call=allow_call)
                    if isinstance(got, tuple):  # a bare $ref branch stays a call (recursion-safe)
                        got = [{"$sgrun_call": got[1], "$sgrun_branch": (b, bptr, base)}]
                    per_branch.append(got)
                if key == "oneOf":
                    per_branch = self._exclusive_branches(per_branch, branches_raw, rest, schema, ptr, base, depth)
                for g in per_branch:
                    out.extend(g)
                return out
        return [s]

    def _rewrites(self, s: dict) -> list[Any]:
        """Pop dependencies, if/then/else and `not`s with a positive complement from `s`;
        return the allOf parts that enforce them exactly (schema_rewrites)."""
        if "unevaluatedProperties" in s or "unevaluatedItems" in s:
            return []  # if / dependentSchemas annotations reach unevaluated*: left to the refusal path
        parts = dependency_parts(s)
        cond = conditional_part(s)
        if cond is not None and cond is not True:
            parts.append(cond)
        if "not" in s:
            neg = negate(self._in_draft(s["not"]))
            if neg is not None and not (isinstance(s["not"], dict) and set(s["not"]) <= {"type", "enum", "const"}):
                s.pop("not")
                parts.append(neg)
        return parts

    def _all_of(self, parts: list[Any], ptrs: list[str], bases: list[str], depth: int) -> list[dict]:
        alternatives: list[dict] = [{}]
        for part, p, b in zip(parts, ptrs, bases):
            if part is True:
                continue
            if part is False:
                return []
            if not isinstance(part, dict):
                raise InvalidSchemaError(f"schema at {p} must be an object or a boolean")
            got = self.expand(part, p, b, depth + 1)
            nxt = []
            for a in alternatives:
                for g in got:
                    nxt.append(merge_schemas(a, g, p, pattern_matches, self.refuse))
            if len(nxt) > 256:
                raise UnsupportedSchemaError("allOf", p, "too many anyOf/oneOf combinations to merge")
            alternatives = nxt
        return alternatives

    def _exclusive_branches(self, per_branch: list[list[dict]], raw: list[Any], rest: dict, schema: dict, ptr: str,
                            base: str, depth: int) -> list[list[dict]]:
        """oneOf is enforced as anyOf, which is exact when no value matches two branches. Branches
        that may overlap become `branch AND NOT other` for each overlapping other whose complement
        is buildable (schema_rewrites.negate): then a value matching two of them matches neither
        rewrite, as oneOf wants. Otherwise refused (lenient: enforced as anyOf)."""
        sigs = [[sig for s in br for sig in self._signatures(s, depth)] for br in per_branch]
        overlaps: dict[int, list[int]] = {}
        for i in range(len(sigs)):
            for j in range(i + 1, len(sigs)):
                if any(not _disjoint(a, b) and not self._values_miss(a, b) and not self._values_miss(b, a)
                       for a in sigs[i] for b in sigs[j]):
                    overlaps.setdefault(i, []).append(j)
                    overlaps.setdefault(j, []).append(i)
        if not overlaps:
            return per_branch
        negated: dict[int, Any] = {}
        for j in overlaps:
            neg = negate(self._in_draft(self._resolved(raw[j], base)))
            if neg is None:
                # No positive complement: "exactly one branch" as one automaton (exactly_one).
                return [[{"$sgrun_one_of": (per_branch, ptr, "oneOf")}]]
            negated[j] = neg
        out = list(per_branch)
        for i, others in overlaps.items():
            b = {} if raw[i] is True else raw[i]
            parts = [b] + [negated[j] for j in others] + ([rest] if rest else [])
            if rest and not _declared_before(schema, "oneOf", "properties"):
                parts = [rest] + parts[:-1]
            bptr = f"{ptr}/oneOf/{i}"
            out[i] = self._all_of(parts, [bptr] * len(parts), [base] * len(parts), depth)
        return out

    def _in_draft(self, schema: Any) -> Any:
        """`schema` without the keywords its declared draft lacks, at every level negate reads
        (a draft-04 `const` validates nothing: its complement is not `not const`)."""
        if not self.not_in_draft or not isinstance(schema, dict):
            return schema
        out = {}
        for k, v in schema.items():
            if k in self.not_in_draft:
                continue
            if k in ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas") \
                    and isinstance(v, dict):
                v = {name: self._in_draft(x) for name, x in v.items()}
            elif k in ("allOf", "anyOf", "oneOf", "prefixItems") and isinstance(v, list) \
                    or k == "items" and isinstance(v, list):
                v = [self._in_draft(x) for x in v]
            elif k in ("not", "items", "additionalProperties", "additionalItems", "if", "then", "else", "contains",
                       "propertyNames"):
                v = self._in_draft(v)
            out[k] = v
        return out

    def _resolved(self, schema: Any, base: str) -> Any:
        """`schema` with bare $refs followed (for negate, which needs the referenced keywords)."""
        for _ in range(_MAX_EXPAND):
            if not (isinstance(schema, dict) and "$ref" in schema
                    and not {k for k in schema if k not in ANNOTATIONS} - {"$ref"}):
                return schema
            try:
                schema, _, base = self.index.resolve(schema["$ref"], self.index.base_for(schema, base), "#")
            except ConstraintError:
                return schema
        return schema

    def _signatures(self, s: dict, depth: int) -> list[dict]:
        if "$sgrun_call" in s:  # a $ref branch kept as a call: look at what it expands to
            b, bptr, base = s["$sgrun_branch"]
            try:
                got = self.expand(b, bptr, base, depth + 1)
            except ConstraintError:
                return [{"types": None}]
            return [self._signature(g) for g in got]
        return [self._signature(s)]

    def _values_miss(self, a: dict, b: dict) -> bool:
        """Whether none of a's listed values (enum / const) is valid for b's (plain) schema."""
        if "values" not in a or b.get("schema") is None or "$sgrun_call" in b["schema"]:
            return False
        s = b["schema"]
        if any(k in s for k in ("allOf", "anyOf", "oneOf", "$ref", "not", "if", "$sgrun_one_of", "$sgrun_not_exact")):
            return False
        allowed = set(self._types(s, "#"))
        if "number" in allowed:
            allowed.add("integer")
        rest = {k: v for k, v in s.items() if k not in ("type",) and k not in ANNOTATIONS}
        if "const" in rest or "enum" in rest:
            return False  # (two value lists: _disjoint compares them)
        try:
            return all(_json_type(v) not in allowed or (rest and not self._scalar_ok(v, rest))
                       for v in a["raw_values"] if _json_type(v) not in ("array", "object"))
        except (ConstraintError, TypeError, ValueError):
            return False

    def _signature(self, s: dict) -> dict:
        if "$sgrun_call" in s or "$sgrun_one_of" in s:
            return {"types": None}
        types = self._types(s, "#")
        sig: dict[str, Any] = {"types": set(types), "schema": s}
        if "const" in s or "enum" in s:
            vals = [s["const"]] if "const" in s else list(s["enum"])
            sig["values"] = {canonical_json(v) for v in vals}
            sig["raw_values"] = vals
            # a value list admits only its values' types ({"enum": ["off"]} is disjoint from integers)
            allowed = set(types) | ({"integer"} if "number" in types else set())
            sig["types"] = {t for t in (_json_type(v) for v in vals) if t in allowed}
        if "object" in types:
            props = s.get("properties", {})
            consts = {}
            for name in s.get("required", []):
                p = props.get(name)
                if isinstance(p, dict) and ("const" in p or "enum" in p):
                    consts[name] = {canonical_json(v) for v in ([p["const"]] if "const" in p else p["enum"])}
            sig["consts"] = consts
            sig["required"] = set(s.get("required", []))
            closed = s.get("additionalProperties", True) is False and not s.get("patternProperties")
            sig["allowed"] = set(props) if closed else None
        if "integer" in types or "number" in types:
            sig["int_only"] = "number" not in types
        return sig

    # --- a plain schema: a union over the JSON types it admits -----------------------------
    def refuse(self, keyword: str, ptr: str, reason: str, s: dict | None = None) -> None:
        """Refuse a keyword we cannot enforce exactly; lenient: loosen it (the caller drops it or
        enforces something weaker) and record a warning naming it."""
        if self.lenient:
            msg = f"JSON Schema keyword {keyword!r} at {ptr or '#'} is not enforced: {reason}"
            self.warn(msg)
            if s is not None:
                s.pop(keyword, None)
            return
        raise UnsupportedSchemaError(keyword, ptr, reason)

    def warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)
            warnings.warn(f"sgrun: {msg}", stacklevel=4)

    def _types(self, s: dict, ptr: str) -> list[str]:
        t = s.get("type")
        if t is None:
            return list(ALL_TYPES)
        ts = [t] if isinstance(t, str) else list(t)
        for x in ts:
            if x not in ALL_TYPES and x != "integer":
                raise InvalidSchemaError(f"unknown type {x!r} at {ptr}")
        if "number" in ts and "integer" in ts:
            ts.remove("integer")
        return ts

    def plain_node(self, s: dict, ptr: str, base: str) -> Node:
        if "$sgrun_call" in s:
            return s["$sgrun_call"]
        if "$sgrun_one_of" in s:
            branches, one_ptr, keyword = s["$sgrun_one_of"]
            return self._exactly_one(branches, one_ptr, base, keyword)
        if s.get("type") == []:  # an allOf of disjoint types
            return NOTHING
        check_keywords(s, ptr)
        s = self._normalize_numbers(dict(s), ptr)
        self._check_keywords(s, ptr)
        if "not" in s:
            s = self._apply_not(s, ptr)
            if s is None:
                return NOTHING
            hard = s.pop("$sgrun_not_exact", None)
            if hard:
                # rest AND NOT n = exactly one of [rest, rest AND n] (rest AND n is inside rest)
                n = hard[0] if len(hard) == 1 else {"anyOf": hard}
                both = self._all_of([s, n], [ptr, f"{ptr}/not"], [base, base], 1)
                return self._exactly_one([[s], both], ptr, base, "not")
        types = self._types(s, ptr)
        if "enum" in s or "const" in s:
            return self._enum_node(s, types, ptr, base)
        parts = []
        for t in types:
            if t == "null":
                parts.append(lit("null"))
            elif t == "boolean":
                keep = s.get("$sgrun_bool")
                parts.append(alt(lit("true"), lit("false")) if keep is None else lit("true" if keep else "false"))
            elif t in ("integer", "number"):
                parts.append(self._number_node(s, t == "integer", ptr))
            elif t == "string":
                parts.append(self._string_node(s, ptr))
            elif t == "array":
                parts.append(self._array_node(s, ptr, base))
            elif t == "object":
                parts.append(self._object_node(s, ptr, base))
        return alt(*parts)

    _KNOWN = frozenset({
        "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties", "items",
        "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength",
        "pattern", "$sgrun_patterns", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "multipleOf", "minProperties", "maxProperties", "not", "propertyNames", "contains", "minContains",
        "maxContains", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
        "unevaluatedProperties", "unevaluatedItems",
    })

    def _check_keywords(self, s: dict, ptr: str) -> None:
        types = set(self._types(s, ptr))
        if "number" in types:
            types.add("integer")
        if "if" in s and ("unevaluatedProperties" in s or "unevaluatedItems" in s):
            self.refuse("unevaluatedProperties" if "unevaluatedProperties" in s else "unevaluatedItems", ptr,
                        "unevaluated* next to 'if' is not supported", s)
        if "if" in s and ("then" in s or "else" in s):
            self.refuse("if", ptr, "conditional schemas (if/then/else) are not supported", s)
        for k in ("if", "then", "else"):
            s.pop(k, None)
        if "contains" in s and "array" in types:
            self.refuse("contains", ptr, "array 'contains' is not supported", s)
        s.pop("contains", None)
        s.pop("minContains", None)
        s.pop("maxContains", None)
        for k in ("dependentRequired", "dependentSchemas", "dependencies"):
            if k in s and s[k] and "object" in types:
                self.refuse(k, ptr, "property dependencies are not supported", s)
            s.pop(k, None)
        if "uniqueItems" in s:
            if s.pop("uniqueItems") is True and "array" in types and s.get("maxItems", 2) > 1:
                s["$sgrun_unique"] = True  # _array_node builds it over a small item domain, or refuses
        for k in ("unevaluatedProperties", "unevaluatedItems"):
            if k in s:
                if s[k] is True or s[k] == {}:
                    s.pop(k)
                elif k == "unevaluatedProperties" and "additionalProperties" not in s \
                        and not s.get("patternProperties"):
                    s["additionalProperties"] = s.pop(k)
                elif k == "unevaluatedItems" and "items" not in s and "additionalItems" not in s \
                        and not isinstance(s.get("items"), list):
                    if "prefixItems" in s or True:
                        s["items"] = s.pop(k)
                else:
                    self.refuse(k, ptr, f"{k} together with other applicators is not supported", s)
                    s.pop(k, None)
        if "propertyNames" in s:
            pn = s["propertyNames"]
            if pn is True or pn == {} or "object" not in types:
                s.pop("propertyNames")
            elif not (isinstance(pn, dict) or pn is False):
                raise InvalidSchemaError(f"propertyNames at {ptr} must be a schema")
        lo, hi = s.pop("minProperties", 0), s.pop("maxProperties", None)
        if "object" in types and (lo or hi is not None):
            declared = set(s.get("properties", {})) | set(s.get("required", []))
            open_ = s.get("additionalProperties", True) is not False or bool(s.get("patternProperties"))
            if lo <= len(set(s.get("required", []))):
                lo = 0  # the required keys already make the count
            if hi is not None and not open_ and len(declared) <= hi:
                hi = None  # no object the rest allows has more
            if lo and open_ and len(declared) + 1 < lo:
                # Extra members may repeat a key (a parsed object keeps one), so they count once
                # toward minProperties: more would need distinct keys the automaton cannot check.
                self.refuse("minProperties", ptr, f"minProperties {lo} needs {lo - len(declared)} distinct "
                                                  f"additional keys; only one can be told apart from a repeat")
                lo = 0
            if lo or hi is not None:  # (its cost is checked where the object is built)
                old = s.get("$sgrun_count")  # (a rest schema built again: keep both bounds)
                if old:
                    lo, hi = max(lo, old[0]), old[1] if hi is None else hi if old[1] is None else min(hi, old[1])
                s["$sgrun_count"] = (int(lo), None if hi is None else int(hi))
        for k in list(s):
            if k not in self._KNOWN and k not in ANNOTATIONS and not k.startswith("$sgrun"):
                pass  # unknown keywords are annotations in JSON Schema (no validation meaning)

    def _normalize_numbers(self, s: dict, ptr: str) -> dict:
        # Draft-4 boolean exclusive bounds -> numeric (draft-6+) form.
        for bound, excl in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
            if isinstance(s.get(excl), bool):
                if s.pop(excl) and bound in s:
                    s[excl] = s.pop(bound)
        return s

    def _apply_not(self, s: dict, ptr: str) -> dict | None:
        n = s.pop("not")
        if n is False:
            return s
        if n is True or n == {}:
            return None
        if isinstance(n, dict):
            inner = {k: v for k, v in n.items() if k not in ANNOTATIONS}
            if set(inner) == {"anyOf"} and isinstance(inner["anyOf"], list):  # (merged nots) none of them
                for part in inner["anyOf"]:
                    s["not"] = part
                    got = self._apply_not(s, ptr)
                    if got is None:
                        return None
                    s = got
                return s
            if set(inner) == {"type"}:
                banned = set(self._types(inner, ptr + "/not"))
                if "number" in banned:
                    banned.add("integer")
                keep = [t for t in self._types(s, ptr) if t not in banned]
                if "number" in keep and "integer" in banned:
                    # numbers that are not integers: no type list says it; the exact complement does
                    s["$sgrun_not_exact"] = list(s.get("$sgrun_not_exact", [])) + [{"type": "integer"}]
                s["type"] = keep
                return s if keep else None
            if set(inner) in ({"enum"}, {"const"}) and isinstance(inner.get("enum", []), list):
                return self._exclude_values(s, inner.get("enum", [inner.get("const")]), ptr)
        # Anything else: the complement within the rest of the schema, built by plain_node.
        s["$sgrun_not_exact"] = list(s.get("$sgrun_not_exact", [])) + [n]
        return s

    def _exclude_values(self, s: dict, vals: list[Any], ptr: str) -> dict | None:
        """`not: {enum: vals}` on `s`: each excluded scalar leaves its type's node (strings and
        numbers subtract the value's output forms, booleans keep the other one, null drops)."""
        types = self._types(s, ptr)
        if any(isinstance(v, (list, dict)) for v in vals) and ("array" in types or "object" in types):
            s["$sgrun_not_exact"] = list(s.get("$sgrun_not_exact", [])) + [{"enum": vals}]
            return s
        if any(v is None for v in vals):
            types = [t for t in types if t != "null"]
        bools = {v for v in vals if isinstance(v, bool)}
        if bools == {True, False}:
            types = [t for t in types if t != "boolean"]
        elif bools:
            s["$sgrun_bool"] = not next(iter(bools))
        nums = [v for v in vals if _json_type(v) in ("integer", "number")]
        if nums:
            s["$sgrun_exclude_num"] = list(s.get("$sgrun_exclude_num", [])) + nums
        strs = [v for v in vals if isinstance(v, str)]
        if strs:
            s["$sgrun_exclude"] = list(s.get("$sgrun_exclude", [])) + strs
        s["type"] = types
        return s if types else None

    def _enum_node(self, s: dict, types: list[str], ptr: str, base: str) -> Node:
        values = [s["const"]] if "const" in s else s["enum"]
        if not isinstance(values, list):
            raise InvalidSchemaError(f"enum at {ptr} must be a list")
        allowed = set(types)
        if "number" in allowed:
            allowed.add("integer")
        rest = {k: v for k, v in s.items() if k not in ("enum", "const", "type") and k not in ANNOTATIONS}
        out = []
        seen = set()
        for v in values:
            if _json_type(v) not in allowed:
                continue
            if rest and not self._scalar_ok(v, rest):
                continue
            text = canonical_json(v)
            if text not in seen:
                seen.add(text)
                out.append(json_literal_node(v, self.ws, self.ws_after))
        return alt(*out) if out else NOTHING

    def _scalar_ok(self, v: Any, s: dict) -> bool:
        """Check an enum value against its sibling keywords (scalars exactly; containers by a
        standalone compile of the sibling schema)."""
        t = _json_type(v)
        if t == "boolean":
            return s.get("$sgrun_bool", v) == v
        if t in ("integer", "number"):
            x = Decimal(str(v))
            if any(x == Decimal(str(e)) for e in s.get("$sgrun_exclude_num", [])):
                return False
            if "minimum" in s and x < Decimal(str(s["minimum"])):
                return False
            if "maximum" in s and x > Decimal(str(s["maximum"])):
                return False
            if "exclusiveMinimum" in s and x <= Decimal(str(s["exclusiveMinimum"])):
                return False
            if "exclusiveMaximum" in s and x >= Decimal(str(s["exclusiveMaximum"])):
                return False
            if "multipleOf" in s and x % Decimal(str(s["multipleOf"])) != 0:
                return False
            return True
        if t == "string":
            n = len(v)
            if n < s.get("minLength", 0) or n > s.get("maxLength", n):
                return False
            pats = ([s["pattern"]] if "pattern" in s else []) + list(s.get("$sgrun_patterns", []))
            if any(not pattern_matches(p, v) for p in pats):
                return False
            fmt = s.get("format")
            if fmt in KNOWN_FORMATS and not format_dfa(fmt).fullmatch(v.encode()):
                return False
            return v not in s.get("$sgrun_exclude", [])
        if t in ("array", "object"):
            sub = SchemaCompiler({**{k: self.root[k] for k in ("$defs", "definitions") if isinstance(self.root, dict)
                                     and k in self.root}, **s})
            nfa_root = sub.compile_root()
            from sgrun.constrain.lazy_dfa import LazyDFA
            sub.nfa.trim()
            if nfa_root not in sub.nfa.nonempty_fragments():
                return False
            d = LazyDFA(sub.nfa, nfa_root)
            st = d.initial
            for b in canonical_json(v).encode():
                st = d.step(st, b)
                if st == 0:
                    return False
            return d.accepting[st]
        return True

    def _exactly_one(self, branches: list[list[dict]], ptr: str, base: str, keyword: str) -> Node:
        """Values matching exactly one of `branches` (each a list of plain alternatives), as one
        automaton (exactly_one); refused by `keyword` where it cannot be built exactly
        (lenient: any branch, as anyOf)."""
        nodes = [alt(*(self.plain_node(d, ptr, base) for d in br)) for br in branches]
        live = [i for i, n in enumerate(nodes) if n != NOTHING]
        if len(live) <= 1:
            return nodes[live[0]] if live else NOTHING
        try:
            # Output keeps the key order asked for, but a value belongs to a branch whatever
            # order its keys come in: the count runs over every branch in any key order.
            saved, self.any_order = self.any_order, True
            try:
                counted = [alt(*(self.plain_node(d, ptr, base) for d in branches[i])) for i in live]
            except UnsupportedSchemaError as e:
                if "key_order='any'" not in str(e):
                    raise
                raise NotBuildable(f"counting the branches needs their objects in any key order, and "
                                   f"{str(e).split(': ', 1)[1].split('; remove it')[0]}") from None
            finally:
                self.any_order = saved
            return exactly_one_node(self.nfa, [nodes[i] for i in live], counted, self._fragment_node)
        except NotBuildable as e:
            what = {"oneOf": "exactly one branch", "not": "the complement (of a 'not', or of an 'if' without a "
                                                        "then/else partner)"}[keyword]
            self.refuse(keyword, ptr, f"{what} cannot be built exactly: {e} (lenient: enforced as anyOf)")
        except CompileBudgetExceeded as e:
            raise CompileBudgetExceeded(f"JSON Schema keyword {keyword!r} at {ptr}: {e}") from None
        except ConstraintTooComplexError as e:
            self.refuse(keyword, ptr, f"its exact automaton is too big ({e}); simplify the branches "
                                      f"(lenient: enforced as anyOf)")
        return alt(*nodes) if keyword == "oneOf" else nodes[0]

    def _fragment_node(self, fid: int) -> Node | None:
        """Fragment `fid`'s node, defining it now if it waits on the work list; None while it is
        being defined (a recursive reference) or has no node (a product fragment)."""
        node = self.nfa.frag_node.get(fid)
        if node is not None:
            return node
        for i, item in enumerate(self._pending):
            if item[0] == fid:
                del self._pending[i]
                self._define(*item)
                return self.nfa.frag_node[fid]
        return None

    def _define(self, fid: int, schema: Any, ptr: str, base: str, any_order: bool) -> None:
        saved, self.any_order = self.any_order, any_order
        try:
            self.nfa.define_fragment(fid, self.value_node(schema, ptr, base))
        finally:
            self.any_order = saved

    # --- numbers ------------------------------------------------------------------------
    def _number_node(self, s: dict, integer: bool, ptr: str) -> Node:
        def dec(key: str) -> Decimal | None:
            v = s.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise InvalidSchemaError(f"{key} at {ptr} must be a number")
            return Decimal(str(v)) if isinstance(v, float) else Decimal(v)

        lo, lo_x, hi, hi_x = dec("minimum"), False, dec("maximum"), False
        ex_lo, ex_hi = dec("exclusiveMinimum"), dec("exclusiveMaximum")
        if ex_lo is not None and (lo is None or ex_lo >= lo):
            lo, lo_x = ex_lo, True
        if ex_hi is not None and (hi is None or ex_hi <= hi):
            hi, hi_x = ex_hi, True
        mult = s.get("multipleOf")
        if mult is not None:
            if isinstance(mult, bool) or not isinstance(mult, (int, float)) or mult <= 0:
                raise InvalidSchemaError(f"multipleOf at {ptr} must be a positive number")
            if float(mult).is_integer() and abs(mult) < 10 ** 15:
                integer = True
                mult = int(mult)
            else:
                p, q = as_decimal_ratio(Decimal(str(mult)))
                if q > 12 or p > 10 ** 6:
                    self.refuse("multipleOf", ptr, f"multipleOf {mult} is too fine or too large to enforce", s)
                    mult = None
                else:
                    base_node = integer_with_multiple(*integer_bounds(lo, lo_x, hi, hi_x), None) if integer \
                        else number_node(lo, lo_x, hi, hi_x, exponent=False)
                    if base_node == NOTHING:
                        return NOTHING
                    d = product(dfa_from_node(base_node) if base_node[0] != "dfa" else base_node[1],
                                decimal_multiple_dfa(p, q))
                    return ("dfa", d) if d.accepting else NOTHING
        if integer:
            ilo, ihi = integer_bounds(lo, lo_x, hi, hi_x)
            # Integers are generated as integers: 1.0 is an integer from draft 6 on, but strict consumers
            # (pydantic strict mode, openai-agents' output types, serde's i64) reject it, and peers emit
            # `-?(0|[1-9][0-9]*)` too. An integral float instance is reachable as the same JSON number, `1`.
            node = integer_with_multiple(ilo, ihi, mult)
        else:
            node = number_node(lo, lo_x, hi, hi_x)
            if lo is not None or hi is not None:
                node = alt(node, *_exponent_forms(lo, lo_x, hi, hi_x))
        excluded = s.get("$sgrun_exclude_num")
        if excluded and node != NOTHING:
            # A value's forms with an exponent (1e0, 10e-1, ...) are not a regular set: numbers
            # that exclude values are written without exponent, and each excluded value's
            # exponent-free forms (1, 1.0, 1.00, -0 for 0) are subtracted.
            d = product(node[1] if node[0] == "dfa" else dfa_from_node(node),
                        dfa_from_node(number_node(None, False, None, False, exponent=False)))
            d = product(d, dfa_from_node(alt(*(_number_forms(Decimal(str(v))) for v in excluded))), "minus")
            node = ("dfa", d) if d.accepting else NOTHING
        return node

    # --- strings ------------------------------------------------------------------------
    def _string_node(self, s: dict, ptr: str) -> Node:
        lo = int(s.get("minLength", 0))
        hi = s.get("maxLength")
        hi = int(hi) if hi is not None else None
        patterns = ([s["pattern"]] if "pattern" in s else []) + list(s.get("$sgrun_patterns", []))
        fmt = s.get("format")
        if fmt is not None and fmt not in KNOWN_FORMATS:
            # A user who writes a format means it: one sgrun cannot enforce is refused like any
            # unsupported keyword (lenient: dropped, with a warning naming it).
            self.refuse("format", ptr, _unknown_format(fmt))
            fmt = None
        exclude = tuple(s.get("$sgrun_exclude", []))
        if hi is not None and lo > hi:
            return NOTHING
        bound = hi
        while True:
            try:
                node = string_leaf(lo, bound, tuple(patterns), fmt, exclude)
                break
            except UnsupportedSchemaError as e:
                raise UnsupportedSchemaError("pattern", ptr, str(e).split(": ", 1)[-1]) from None
            except ConstraintTooComplexError:
                # The exact length x format/pattern product is too big to build eagerly: a
                # smaller maxLength is sound (every accepted string is valid), longer values
                # are rejected, and the result says so.
                if bound is None or bound // 2 < max(lo, 1):
                    raise
                bound //= 2
        if bound != hi:
            what = "format" if fmt else "pattern"
            if node == NOTHING:
                # Every bound small enough to build admits no string of the pattern: enforcing
                # it would refuse a satisfiable schema as empty. Refuse it as too complex instead.
                raise ConstraintTooComplexError(
                    f"maxLength {hi} at {ptr} together with its {what} is too complex to compile (the exact "
                    f"automaton is too big, and maxLength {bound}, the largest that builds, admits no string "
                    f"of the {what}); lower maxLength or simplify the {what}")
            self.warn(f"maxLength {hi} at {ptr} is enforced as maxLength {bound} together with its "
                      f"{what} (the exact automaton is too big): longer strings are rejected")
        return self.nfa.shared(node) if node != NOTHING else NOTHING

    # --- arrays -------------------------------------------------------------------------
    def _array_node(self, s: dict, ptr: str, base: str) -> Node:
        items = s.get("items", True)
        prefix: list[Any] = list(s.get("prefixItems", []))
        if isinstance(items, list):  # draft 4-2019: items as a tuple, additionalItems for the rest
            prefix, rest_schema, rest_ptr = items, s.get("additionalItems", True), f"{ptr}/additionalItems"
            prefix_ptr = f"{ptr}/items"
        else:
            rest_schema, rest_ptr, prefix_ptr = items, f"{ptr}/items", f"{ptr}/prefixItems"
        lo = int(s.get("minItems", 0))
        hi = s.get("maxItems")
        hi = int(hi) if hi is not None else None
        if rest_schema is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        if hi is not None and lo > hi:
            return NOTHING
        sep = seq(self.ws, lit(","), self.ws_after)
        if s.get("$sgrun_unique"):
            unique = self._unique_array_node(prefix, rest_schema, lo, hi, sep, ptr, base, prefix_ptr, rest_ptr)
            if unique is not None:
                return unique
        elems = [self.call(p, f"{prefix_ptr}/{i}", base) for i, p in enumerate(prefix)]
        rest = self.call(rest_schema, rest_ptr, base) if rest_schema is not False else NOTHING

        def elem(i: int) -> Node:
            return elems[i] if i < len(prefix) else rest

        # Build the non-empty body back to front: optional tail after the required prefix.
        tail: Node = EMPTY
        if hi is None or hi > len(prefix):
            start = max(len(prefix), lo, 1)
            extra_max = None if hi is None else hi - start
            if extra_max is None or extra_max > 0:
                tail = rep(seq(sep, rest), 0, extra_max)
        for i in range(min(len(prefix), hi if hi is not None else len(prefix)) - 1, 0, -1):
            if i >= lo:
                tail = opt(seq(sep, elem(i), tail))
        required = [elem(0)] + [seq(sep, elem(i)) for i in range(1, lo)]
        body = seq(*required, tail) if (hi is None or hi >= 1) else NOTHING
        inner = alt(body, EMPTY) if lo == 0 else body
        return seq(lit("["), self.ws, inner, self.ws, lit("]"))

    def _item_domain(self, schema: Any, ptr: str, base: str) -> list[Any] | None:
        """The values `schema` admits when they are few scalars (enum / const / boolean / null /
        a short integer range), each with one output form; None otherwise."""
        if not isinstance(schema, dict):
            return None
        try:
            alternatives = self.expand(schema, ptr, base, 1)
        except ConstraintError:
            return None
        out: dict[str, Any] = {}
        for a in alternatives:
            if not isinstance(a, dict) or "$sgrun_call" in a:
                return None
            a = self._normalize_numbers(dict(a), ptr)
            types = self._types(a, ptr)
            rest = {k: v for k, v in a.items() if k not in ("enum", "const", "type") and k not in ANNOTATIONS}
            if "enum" in a or "const" in a:
                candidates = [a["const"]] if "const" in a else list(a["enum"])
            elif set(types) <= {"boolean", "null"} and not rest:
                candidates = ([True, False] if "boolean" in types else []) + ([None] if "null" in types else [])
            elif types == ["integer"] and isinstance(a.get("minimum"), int) and isinstance(a.get("maximum"), int) \
                    and a["maximum"] - a["minimum"] < _MAX_UNIQUE_DOMAIN and set(rest) <= {"minimum", "maximum",
                                                                                         "multipleOf"}:
                candidates = list(range(a["minimum"], a["maximum"] + 1))
            else:
                return None
            allowed = set(types) | ({"integer"} if "number" in types else set())
            for v in candidates:
                if _json_type(v) in ("array", "object"):
                    return None  # containers have several output forms (key order): texts would not tell repeats
                if _json_type(v) in allowed and (not rest or self._scalar_ok(v, rest)):
                    out.setdefault(canonical_json(v), v)
        return list(out.values()) if len(out) <= _MAX_UNIQUE_DOMAIN else None

    def _finite_item_values(self, schema: Any, ptr: str, base: str) -> tuple[list[Any] | None, dict[str, list[str]]]:
        """The values `schema` admits when they are finitely many (at most _MAX_UNIQUE_DOMAIN),
        read off its compact automaton (a sub-compile), and each value's compact spellings
        (several where a string may be escaped, or a number written 1.0): (None, {}) otherwise."""
        if not isinstance(schema, dict):
            return None, {}
        try:
            sub = SchemaCompiler(self.root, whitespace="compact", lenient=False,
                                 key_order="required-first" if self.required_first else "schema")
            sub.not_in_draft, sub.legacy_ref = self.not_in_draft, self.legacy_ref
            fid = sub.fragment(schema, ptr, self.index.base_for(schema, base))
            inliner = Inliner(sub.nfa, sub._fragment_node, 0)
            node = inliner.inline(("call", fid))
            if inliner.markers:
                return None, {}  # recursive: unboundedly many values
            words = finite_words(dfa_from_node(node), 8 * _MAX_UNIQUE_DOMAIN)
        except (ConstraintError, NotBuildable):
            return None, {}
        if words is None:
            return None, {}
        values: dict[str, Any] = {}
        texts: dict[str, list[str]] = {}
        for w in words:
            try:
                v = json.loads(w.decode())
            except ValueError:
                return None, {}
            key = value_key(v)  # (key order and 1 / 1.0 make no difference to equality)
            values.setdefault(key, v)
            texts.setdefault(key, []).append(w.decode())
        if len(values) > _MAX_UNIQUE_DOMAIN:
            return None, {}
        return list(values.values()), texts

    def _unique_array_node(self, prefix: list[Any], rest_schema: Any, lo: int, hi: int | None, sep: Node,
                           ptr: str, base: str, prefix_ptr: str, rest_ptr: str) -> Node | None:
        """uniqueItems over small item domains: arrays of distinct values, one NFA state per set
        of values used so far (shared fragments); with prefixItems the n-th item takes the values
        of its own position's schema (n is the size of the set used). None after a refusal that
        lenient loosened."""
        positions = [(p, f"{prefix_ptr}/{i}") for i, p in enumerate(prefix)]
        if hi is None or hi > len(prefix):
            positions.append((rest_schema, rest_ptr))
        values_of: dict[str, Any] = {}  # value key -> value (the union of every position's values)
        texts: dict[str, list[str]] = {}
        allowed: list[set[str]] = []  # per position: the value keys it admits
        for schema, p in positions:
            if schema is True or schema == {}:
                domain = None
            else:
                domain = self._item_domain(schema, p, base) if schema is not False else []
                if domain is None:
                    domain, more = self._finite_item_values(schema, p, base)
                    for key, ts in more.items():
                        texts.setdefault(key, [])
                        texts[key] += [x for x in ts if x not in texts[key]]
            if domain is None:
                self.refuse("uniqueItems", ptr, "uniqueItems: true is enforced where the items admit finitely "
                                                f"many values (at most {_MAX_UNIQUE_DOMAIN}: enums, consts, "
                                                f"booleans, integer ranges, objects and arrays built only of "
                                                f"those); the items at {p} admit unboundedly many (a free string, "
                                                f"number or nested value), and telling such values apart needs "
                                                f"unbounded memory, which no finite automaton has")
                return None
            keys = set()
            for v in domain:
                values_of.setdefault(value_key(v), v)
                keys.add(value_key(v))
            allowed.append(keys)
        if len(values_of) > _MAX_UNIQUE_DOMAIN:
            self.refuse("uniqueItems", ptr, f"uniqueItems over more than {_MAX_UNIQUE_DOMAIN} distinct item values "
                                            f"is not supported")
            return None
        order = list(values_of)
        domain = [values_of[x] for x in order]
        k = len(domain)
        hi = k if hi is None else min(hi, k)
        if sum(comb(k, i) for i in range(min(hi, k) + 1)) > _MAX_UNIQUE_SETS:
            self.refuse("uniqueItems", ptr, f"uniqueItems over {k} item values up to {hi} items needs too many "
                                            f"states; add a smaller maxItems")
            return None

        def at(n: int) -> list[int]:  # indices of the values the n-th item (from 0) may take
            if n < len(prefix):
                keys = allowed[n]
            else:
                keys = allowed[len(prefix)] if len(allowed) > len(prefix) else set()
            return [i for i, x in enumerate(order) if x in keys]

        values = [alt(json_literal_node(v, self.ws, self.ws_after), *(lit(x) for x in texts.get(value_key(v), ())))
                  for v in domain]
        # Built bottom-up (largest sets first) instead of by a recursive closure: a closure that
        # calls itself is a reference cycle holding this compiler and its NFA until the cyclic GC runs.
        memo: dict[int, Node] = {}
        for n in range(min(hi, k), 0, -1):
            nxt = at(n)
            for chosen in combinations(range(k), n):
                used = sum(1 << i for i in chosen)
                options = [EMPTY] if n >= lo else []
                if n < hi:
                    options += [seq(sep, values[i], memo[used | 1 << i]) for i in nxt if not used >> i & 1]
                memo[used] = self.nfa.shared(alt(*options)) if options else NOTHING

        first = alt(*(seq(values[i], memo[1 << i]) for i in at(0))) if hi >= 1 else NOTHING
        inner = alt(first, EMPTY) if lo == 0 else first
        return seq(lit("["), self.ws, inner, self.ws, lit("]"))

    # --- objects ------------------------------------------------------------------------
    def _object_node(self, s: dict, ptr: str, base: str) -> Node:
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise InvalidSchemaError(f"properties at {ptr} must be an object")
        required = list(s.get("required", []))
        pattern_props = s.get("patternProperties", {}) or {}
        additional = s.get("additionalProperties", True)
        names_schema = s.get("propertyNames")
        names = list(props) + [r for r in required if r not in props]
        if self.required_first:
            names = [n for n in names if n in required] + [n for n in names if n not in required]
        key_filter = None
        if names_schema is not None:
            key_filter = self._property_names_dfa(names_schema, f"{ptr}/propertyNames")
        colon = seq(self.ws, lit(":"), self.ws_after)
        members: list[tuple[Node, bool]] = []
        member_names: list[str] = []
        for name in names:
            is_required = name in required
            if key_filter is not None and not key_filter.fullmatch(name.encode()):
                if is_required:
                    return NOTHING
                continue
            parts = []
            if name in props:
                parts.append((props[name], f"{ptr}/properties/{_esc(name)}"))
            for pat, sub in pattern_props.items():
                if pattern_matches(pat, name):
                    parts.append((sub, f"{ptr}/patternProperties/{_esc(pat)}"))
            if not parts:
                parts.append((additional, f"{ptr}/additionalProperties"))
            value = self._all_of_call(parts, base)
            if value == NOTHING:
                if is_required:
                    return NOTHING
                continue
            key = lit(json.dumps(name, ensure_ascii=False))
            members.append((seq(key, colon, value), is_required))
            member_names.append(name)
        extra = self._additional_member(names, pattern_props, additional, key_filter, colon, ptr, base)
        sep = seq(self.ws, lit(","), self.ws_after)
        count = s.get("$sgrun_count")
        if self.any_order and (len(members) > 1 or (members and extra is not None)):
            return seq(lit("{"), self.ws, self._any_order_body(members, extra, sep, count, ptr), self.ws, lit("}"))
        bounds = (count,) if count else ()
        if count:
            members, extra, counted = self._counted_members(members, extra, count, ptr)
            if not counted:
                bounds = ()
        body = ("members", tuple(members), extra, sep) + bounds
        # Required keys that `properties` does not place have no order to follow: up to three of
        # them may come in any order (instances disagree on it).
        loose = [i for i, name in enumerate(member_names) if name not in props]
        if 2 <= len(loose) <= _MAX_LOOSE_REQUIRED:
            from itertools import permutations
            bodies = []
            for order in permutations(loose):
                ms = list(members)
                for slot, src in zip(loose, order):
                    ms[slot] = members[src]
                bodies.append(("members", tuple(ms), extra, sep) + bounds)
            body = alt(*bodies)
        return seq(lit("{"), self.ws, body, self.ws, lit("}"))

    def _any_order_body(self, members: list[tuple[Node, bool]], extra: Node | None, sep: Node, count: tuple | None,
                        ptr: str) -> Node:
        """key_order="any": the declared members in any order, each at most once, additional ones
        anywhere between them. One shared fragment per set of declared members used so far (what
        "each at most once" must remember): 2^n of them, refused past _MAX_ANY_ORDER_SETS."""
        n = len(members)
        if 2 ** n > _MAX_ANY_ORDER_SETS:
            raise UnsupportedSchemaError("properties", ptr, f"key_order='any' over {n} properties needs one automaton "
                                                            f"part per set of properties used so far, 2^{n} = "
                                                            f"{2 ** n:,}; the limit is {_MAX_ANY_ORDER_SETS:,} "
                                                            f"({_MAX_ANY_ORDER_SETS.bit_length() - 1} properties): "
                                                            f"use key_order='schema' for this object")
        lo, hi = count if count else (0, None)
        if count and extra is not None:
            self.refuse("maxProperties" if hi is not None else "minProperties", ptr,
                        "key_order='any' counts properties only on objects without additional properties")
            lo, hi = 0, None
        required = sum(1 << i for i, (_, req) in enumerate(members) if req)
        members = [(self.nfa.shared(m), req) for m, req in members]  # one copy, called from every set
        extras = rep(seq(sep, extra), 0, None) if extra is not None else EMPTY
        after: dict[int, Node] = {}  # set used (non-empty) -> what may follow it
        for used in sorted(range(1, 1 << n), key=lambda u: -bin(u).count("1")):
            size = bin(used).count("1")
            options = [EMPTY] if used & required == required and size >= lo else []
            if hi is None or size < hi:
                options += [seq(sep, members[i][0], after[used | 1 << i]) for i in range(n) if not used >> i & 1]
            after[used] = self.nfa.shared(seq(extras, alt(*options))) if options else NOTHING
        firsts = [seq(members[i][0], after[1 << i]) for i in range(n)]
        if extra is not None:
            # additional members first: then the declared ones (or none) follow as after any member
            tail = [EMPTY] if not required else []
            tail += [seq(sep, members[i][0], after[1 << i]) for i in range(n)]
            firsts.append(seq(extra, extras, alt(*tail)))
        body = alt(*firsts)
        return alt(body, EMPTY) if not required and lo == 0 else body

    def _counted_members(self, members: list[tuple[Node, bool]], extra: Node | None, count: tuple, ptr: str):
        """Members for a counted object (minProperties / maxProperties): the count runs in lanes,
        one copy of every member per count (byte_nfa._build_members), so each member becomes one
        shared fragment called from every lane. Refused past _MAX_COUNT_STATES estimated states
        (lenient: the count is dropped). -> (members, extra, whether the count is enforced)."""
        lo, hi = count
        top = hi if hi is not None else max(lo, 1)
        lanes = top + 1
        cost = (len(members) + 1) * lanes * 3
        if extra is not None:
            cost += sum((hi - c if hi is not None else 1) + 1 for c in range(lanes)) * 4
        if cost > _MAX_COUNT_STATES:
            keyword = "maxProperties" if hi is not None and hi >= lo else "minProperties"
            self.refuse(keyword, ptr, f"counting {len(members)} properties{' and additional ones' if extra else ''} "
                                      f"up to {top} needs about {cost:,} automaton states (one per member and "
                                      f"count{', and per count of additional members' if extra else ''}); the "
                                      f"limit is {_MAX_COUNT_STATES:,}: lower the bound or declare fewer properties")
            return members, extra, False
        if lanes > _SHARE_COUNTED_OVER:
            members = [(self.nfa.shared(m), req) for m, req in members]
            if extra is not None:
                extra = self.nfa.shared(extra)
        return members, extra, True

    def _all_of_call(self, parts: list[tuple[Any, str]], base: str) -> Node:
        schemas = [p for p, _ in parts if p is not True and p != {}]
        if any(p is False for p in schemas):
            return NOTHING
        if not schemas:
            return ("call", self.any_value_fid())
        if len(schemas) == 1:
            return self.call(schemas[0], parts[0][1] if parts[0][0] is schemas[0] else parts[-1][1], base)
        merged = {"allOf": schemas}
        self._keep.append(merged)
        return self.call(merged, parts[0][1], base)

    def _property_names_dfa(self, pn: Any, ptr: str) -> ByteDFA:
        if pn is False:
            return ByteDFA([[]], set())
        allowed = {"type", "pattern", "minLength", "maxLength", "format", "enum", "const"}
        extra = set(k for k in pn if k not in ANNOTATIONS) - allowed
        if extra or pn.get("type", "string") not in ("string", ["string"]):
            self.refuse("propertyNames", ptr, "only string keywords (pattern, length, format, enum) are supported")
            return any_text_dfa()
        d = length_dfa(int(pn.get("minLength", 0)), pn.get("maxLength"))
        if "pattern" in pn:
            d = product(d, pattern_search_dfa(pn["pattern"]))
        if "format" in pn:
            if pn["format"] not in KNOWN_FORMATS:
                self.refuse("format", ptr, _unknown_format(pn["format"]))
            else:
                d = product(d, format_dfa(pn["format"]))
        if "enum" in pn or "const" in pn:
            vals = [v for v in (pn["enum"] if "enum" in pn else [pn["const"]]) if isinstance(v, str)]
            d = product(d, dfa_from_node(alt(*(lit(v) for v in vals)) if vals else NOTHING))
        return d

    def _additional_member(self, names: list[str], pattern_props: dict, additional: Any, key_filter: ByteDFA | None,
                           colon: Node, ptr: str, base: str) -> Node | None:
        if not pattern_props:
            if additional is False:
                return None
            if not names and key_filter is None:
                key = string_node()
            else:
                d = any_text_dfa() if key_filter is None else key_filter
                key = constrained_string_node(excluded_dfa(d, names))
            value = self.call(additional, f"{ptr}/additionalProperties", base)
            return seq(key, colon, value) if value != NOTHING and key != NOTHING else None
        pats = list(pattern_props)
        # One member alternative per non-empty cell of the patterns' Venn diagram (keys matching
        # exactly the chosen patterns): a depth-first walk that prunes empty intersections, so
        # disjoint patterns cost n + 1 cells, not 2^n.
        cells: list[tuple[list[str], ByteDFA]] = []
        todo: list[tuple[int, list[str], ByteDFA]] = [(0, [], any_text_dfa() if key_filter is None else key_filter)]
        while todo:
            i, chosen, d = todo.pop()
            if i == len(pats):
                d = excluded_dfa(d, names)
                if d.accepting:
                    cells.append((chosen, d))
                    if len(cells) > _MAX_PATTERN_CELLS:
                        self.refuse("patternProperties", ptr, f"the patterns overlap in more than "
                                                              f"{_MAX_PATTERN_CELLS} ways")
                        break
                continue
            for op in ("minus", "and"):
                nd = product(d, pattern_search_dfa(pats[i]), op)
                if nd.accepting:
                    todo.append((i + 1, chosen + [pats[i]] if op == "and" else chosen, nd))
        alts = []
        for chosen, d in cells:
            if chosen:
                value = self._all_of_call([(pattern_props[p], f"{ptr}/patternProperties/{_esc(p)}") for p in chosen],
                                          base)
            else:
                value = self.call(additional, f"{ptr}/additionalProperties", base)
            if value == NOTHING:
                continue
            alts.append(seq(constrained_string_node(d), colon, value))
        return alt(*alts) if alts else None

    # --- any JSON value -------------------------------------------------------------------
    def any_value_fid(self) -> int:
        if self._any_fid is None:
            self._any_fid = self.nfa.new_fragment()
            value = ("call", self._any_fid)
            sep = seq(self.ws, lit(","), self.ws_after)
            colon = seq(self.ws, lit(":"), self.ws_after)
            member = seq(string_node(), colon, value)
            obj = seq(lit("{"), self.ws, opt(seq(member, rep(seq(sep, member), 0, None))), self.ws, lit("}"))
            arr = seq(lit("["), self.ws, opt(seq(value, rep(seq(sep, value), 0, None))), self.ws, lit("]"))
            node = alt(lit("null"), lit("true"), lit("false"), number_node(None, False, None, False), string_node(),
                       obj, arr)
            self.nfa.define_fragment(self._any_fid, node)
        return self._any_fid


def json_literal_node(v: Any, ws: Node = EMPTY, ws_after: Node | None = None) -> Node:
    """One JSON value as the compiler's whitespace option prints it (`ws` inside brackets and
    before `,` `:`, `ws_after` after them; default `ws`); objects with few keys in any key order (a
    const or enum object is the same value whatever order its keys come in); an integral number as
    an integer; a non-ASCII string also escaped (json.dumps default)."""
    ws_after = ws if ws_after is None else ws_after
    comma, colon = seq(ws, lit(","), ws_after), seq(ws, lit(":"), ws_after)

    def member(k: str, x: Any) -> Node:
        return seq(lit(json.dumps(k, ensure_ascii=False)), colon, json_literal_node(x, ws, ws_after))

    def wrap(open_: str, parts: list[Node], close: str) -> Node:
        return seq(lit(open_), ws, *_join(comma, parts), ws, lit(close)) if parts else lit(open_ + close)

    if isinstance(v, dict) and 1 < len(v) <= _MAX_PERMUTED_KEYS:
        from itertools import permutations
        members = {k: member(k, x) for k, x in v.items()}
        return alt(*(wrap("{", [members[k] for k in order], "}") for order in permutations(v)))
    if isinstance(v, dict):
        return wrap("{", [member(k, x) for k, x in v.items()], "}")
    if isinstance(v, list):
        return wrap("[", [json_literal_node(x, ws, ws_after) for x in v], "]")
    text = canonical_json(v)
    if isinstance(v, str) and not v.isascii():
        return alt(lit(text), lit(json.dumps(v)))  # raw UTF-8, or json.dumps' default \u escapes
    return lit(text)


# Exponent spellings stay inside what a float64 holds: a validator on Python floats (jsonschema)
# reads 1e-400 as 0.0 and 1e400 as inf, so under exclusiveMinimum 0 an unbounded exponent would
# accept a value the validator rejects. A mantissa below 1e8 (or with at most 7 leading fraction
# zeros) and |exponent| <= 299 keeps every value between 1e-307 and 1e307.
_MANTISSA_NONZERO = "([1-9][0-9]{0,7}(\\.[0-9]+)?|0\\.0{0,7}[1-9][0-9]*)"
_EXP_ANY = "[eE][+-]?0*([0-9]{1,2}|[12][0-9]{2})"
_EXP_NEG = "[eE]-0*([1-9][0-9]?|[12][0-9]{2})"
_EXP_16_UP = "[eE]\\+?0*(1[6-9]|[2-9][0-9]|[12][0-9]{2})"


def _exponent_forms(lo: Decimal | None, lo_x: bool, hi: Decimal | None, hi_x: bool) -> list[Node]:
    """Exponent spellings a bounded number may also take, each a whole class of values the
    interval contains: every positive (negative) number when the interval reaches +inf (-inf)
    from 0, magnitudes below 1 written d.ddde-k (how Python and serde print 1e-05), those of
    1e16 and up written d.ddde+16, and zero. Only where every mantissa of the form is itself an
    in-range number (or a prefix of one): a form whose mantissa only an exponent can complete
    (`2.3...` under maximum 1.5) would let a sampling model wander into digits it can never end."""
    exp = _EXP_ANY
    forms = []
    pos_all = (lo is None or lo <= 0) and hi is None
    neg_all = (hi is None or hi >= 0) and lo is None
    if pos_all:
        forms.append(_MANTISSA_NONZERO + exp)
    elif (lo is None or lo <= 0) and hi is not None and hi >= 2:
        top = min(int(hi) - 1, 9)  # d.ddd < d + 1 <= hi for the leading digits 1..top
        forms.append(f"[1-{top}](\\.[0-9]+)?{_EXP_NEG}")
    elif (lo is None or lo <= 0) and hi is not None and hi >= 1:
        forms.append("1" + _EXP_NEG)  # 1e-05 in [0, 1]: the mantissa 1 is in range
    elif hi is None and lo is not None and lo <= 1:  # d.ddde+16 and up: >= 1e16, mantissa >= 1 >= lo
        forms.append("[1-9](\\.[0-9]+)?" + _EXP_16_UP)
    if neg_all:
        forms.append("-" + _MANTISSA_NONZERO + exp)
    elif (hi is None or hi >= 0) and lo is not None and lo <= -2:
        top = min(int(-lo) - 1, 9)
        forms.append(f"-[1-{top}](\\.[0-9]+)?{_EXP_NEG}")
    if (lo is None or lo < 0 or (lo == 0 and not lo_x)) and (hi is None or hi > 0 or (hi == 0 and not hi_x)):
        forms.append("-?0(\\.0+)?" + exp)
    return [parse_regex(f).fullmatch_node() for f in forms]


def _number_forms(x: Decimal) -> Node:
    """Every exponent-free JSON spelling of the number x (trailing fraction zeros, -0)."""
    if x == 0:
        return seq(opt(lit("-")), lit("0"), opt(seq(lit("."), rep(lit("0"), 1, None))))
    sign, digits, exp = x.normalize().as_tuple()
    text = format(abs(x.normalize()), "f")
    head = lit(("-" if sign else "") + text)
    if "." in text:
        return seq(head, rep(lit("0"), 0, None))
    return seq(head, opt(seq(lit("."), rep(lit("0"), 1, None))))


def _join(sep: Node, items: list[Node]) -> list[Node]:
    out: list[Node] = []
    for i, x in enumerate(items):
        if i:
            out.append(sep)
        out.append(x)
    return out


def _esc(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _disjoint(a: dict, b: dict) -> bool:
    if a["types"] is None or b["types"] is None:
        return False
    ta, tb = set(a["types"]), set(b["types"])
    for t in (ta, tb):
        if "number" in t:
            t.add("integer")
    common = ta & tb
    if not common:
        return True
    if "values" in a and "values" in b and not (a["values"] & b["values"]):
        return True
    if "values" in a and "values" in b:
        return False
    if common == {"object"} or common <= {"object"}:
        for name in set(a.get("consts", {})) & set(b.get("consts", {})):
            if not (a["consts"][name] & b["consts"][name]):
                return True
        if a.get("allowed") is not None and (b.get("required", set()) - a["allowed"]):
            return True
        if b.get("allowed") is not None and (a.get("required", set()) - b["allowed"]):
            return True
    if common <= {"integer", "number"} and "integer" in common:
        pass
    return False


def _unknown_format(fmt: Any) -> str:
    return (f"format {fmt!r} is not a JSON Schema 2020-12 format (sgrun enforces those: "
            f"{', '.join(sorted(KNOWN_FORMATS))}); write the pattern it stands for instead")


def schema_to_nfa(schema: Any, whitespace: str = "compact", lenient: bool = False,
                  key_order: str = "schema") -> tuple[ByteNFA, int, list[str]]:
    """-> (NFA, root fragment, warnings: what lenient mode dropped or loosened)."""
    if not isinstance(schema, (dict, bool)):
        raise InvalidSchemaError("a JSON Schema must be an object or a boolean")
    check_document_depth(schema)
    from sgrun.constrain.native_nfa import new_program_nfa
    from sgrun.constrain.nfa_program import NeedsListNFA
    program = new_program_nfa()
    if program is not None:
        try:  # the NFA as a program, built in C++ (nfa_program)
            compiler = SchemaCompiler(schema, whitespace=whitespace, lenient=lenient, key_order=key_order,
                                      nfa=program)
            root = compiler.compile_root()
            compiler.nfa.sealed = True
            return compiler.nfa, root, compiler.warnings
        except NeedsListNFA:
            pass  # (an exactly-one product with calls writes states itself: the list build below)
    compiler = SchemaCompiler(schema, whitespace=whitespace, lenient=lenient, key_order=key_order)
    root = compiler.compile_root()
    return compiler.nfa, root, compiler.warnings


def _declared_before(schema: dict, key: str, other: str) -> bool:
    """Whether `key` comes before `other` in the schema as written (absent `other`: False)."""
    keys = list(schema)
    return other in schema and key in schema and keys.index(key) < keys.index(other)
