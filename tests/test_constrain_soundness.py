"""Soundness of the JSON Schema compiler: fixed regressions, bad input that must get a clear
ConstraintError, and a property test — every compiled constraint rejects every instance that
`jsonschema` rejects (serialized the way the compiler emits it), over generated schemas."""

from __future__ import annotations

import json
import time
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrain_fixtures import SchemaOrder, load_default_tokenizer
from schema_strategies import SCHEMAS, VALUES, validator
from sgrun.constrain import compile_constraint
from sgrun.constrain.errors import ConstraintTooComplexError, EmptyConstraintError, InvalidSchemaError
from sgrun.errors import ConstraintError


@pytest.fixture(scope="module")
def constrain_tok():
    return load_default_tokenizer()


def _compile(tok, schema, **kw):
    return compile_constraint(tok, json_schema=schema, warm_up=False, use_cache=False, **kw)


def test_allof_with_anyof_of_refs_keeps_sibling_keywords(constrain_tok):
    c = _compile(constrain_tok, {"$defs": {"any": {}}, "allOf": [{"type": "string"}, {"anyOf": [{"$ref": "#/$defs/any"}]}]})
    assert not c.matches_bytes(b"123") and c.matches_bytes(b'"a"')
    c = _compile(constrain_tok, {"$defs": {"x": {"type": "object"}},
                                 "allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                           {"anyOf": [{"$ref": "#/$defs/x"}, {"$ref": "#/$defs/x"}]}]})
    assert not c.matches_bytes(b'{"b":1}') and c.matches_bytes(b'{"a":1}')


@pytest.mark.parametrize("schema, needle", [
    ({"type": "object", "required": 7}, "'required' at # must be a list"),
    ({"type": "string", "minLength": -1}, "'minLength' at # must be a non-negative integer"),
    ({"type": "string", "maxLength": "5"}, "'maxLength' at # must be a non-negative integer"),
    ({"properties": {"a": {"type": "strin"}}}, "'type' at #/properties/a"),
    ({"allOf": [{"maxLength": 3}, {"maxLength": "4"}]}, "'maxLength' at #/allOf/1"),
    ({"anyOf": []}, "'anyOf' at # must be a non-empty list"),
])
def test_bad_keyword_values_are_invalid_schema_errors(constrain_tok, schema, needle):
    with pytest.raises(InvalidSchemaError, match=needle.replace("[", r"\[")):
        _compile(constrain_tok, schema)


def test_nesting_limits_are_named_never_recursion_errors(constrain_tok):
    deep: dict = {}
    cur = deep
    for _ in range(5000):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(ConstraintTooComplexError, match="limit"):
        _compile(constrain_tok, deep)
    with pytest.raises(ConstraintError, match="limit"):
        _compile(constrain_tok, "[" * 100_000 + "]" * 100_000)
    nested: dict = {"type": "object"}
    cur = nested
    for _ in range(120):  # 120 nested objects: within the document limit, past the value-nesting one
        cur["properties"] = {"a": {"type": "object"}}
        cur["required"] = ["a"]
        cur = cur["properties"]["a"]
    with pytest.raises(ConstraintTooComplexError, match="limit is 100"):
        _compile(constrain_tok, nested)


def test_hostile_numbers_and_lengths_compile_fast(constrain_tok):
    t = time.perf_counter()
    c = _compile(constrain_tok, {"type": "integer", "minimum": 0, "maximum": 9223372036854775807})
    assert c.matches_bytes(b"9223372036854775807") and not c.matches_bytes(b"9223372036854775808")
    c = _compile(constrain_tok, {"type": "integer", "minimum": 0, "maximum": 1e18, "multipleOf": 7})
    for x in (0, 7, 999999999999999999, 10**18 - 8, 10**18 + 6, 13, 10**18 - 2):
        assert c.matches_bytes(str(x).encode()) == (x % 7 == 0 and x <= 10**18), x
    c = _compile(constrain_tok, {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 4096}
                                                                  for i in range(10)}})
    assert c.matches_bytes(b'{"p3":"' + b"x" * 4096 + b'"}') and not c.matches_bytes(b'{"p3":"' + b"x" * 4097 + b'"}')
    c = _compile(constrain_tok, {"type": "string", "pattern": "[a-z]+@[a-z]+\\.[a-z]{2,}"})  # unanchored: searched
    assert c.matches_bytes(b'"mail me at ada@example.org today"') and not c.matches_bytes(b'"ada@example"')
    assert time.perf_counter() - t < 5


def test_unknown_format_is_refused_or_dropped_under_lenient(constrain_tok):
    with pytest.raises(ConstraintError, match="'format'.*semver"):
        _compile(constrain_tok, {"type": "string", "format": "semver"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = _compile(constrain_tok, {"type": "string", "format": "semver"}, lenient=True)
    assert c.matches_bytes(b'"anything"')
    assert any("semver" in w for w in c.warnings)


def test_lenient_loosens_every_refusal_with_a_named_warning(constrain_tok):
    # (a recursive tree against arrays of any values: both nest without bound at one place)
    overlapping = {"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}},
                   "oneOf": [{"$ref": "#/$defs/t"}, {"type": "array", "items": {"type": "array"}}]}
    with pytest.raises(ConstraintError, match="oneOf"):
        _compile(constrain_tok, overlapping)
    unmergeable = {"allOf": [{"format": "date"}, {"format": "email"}]}
    with pytest.raises(ConstraintError, match="allOf"):
        _compile(constrain_tok, unmergeable)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = _compile(constrain_tok, overlapping, lenient=True)
        assert c.matches_bytes(b'[[]]') and any("'oneOf'" in w for w in c.warnings)
        c = _compile(constrain_tok, unmergeable, lenient=True)
        assert any("'allOf'" in w for w in c.warnings)


def test_annotation_keys_merge_in_allof(constrain_tok):
    c = _compile(constrain_tok, {"allOf": [{"x-intellij-html-description": "a", "_id": 1, "type": "object"},
                                           {"x-intellij-html-description": "b", "_id": 2, "translation": {}}]})
    assert c.matches_bytes(b"{}") and not c.matches_bytes(b"1")


def test_key_order_follows_declaration_and_required_first(constrain_tok):
    base = {"$defs": {"b": {"properties": {"id": {"type": "integer"}}, "required": ["id"]}}}
    parts_first = {**base, "allOf": [{"$ref": "#/$defs/b"}], "properties": {"name": {"type": "string"}}}
    own_first = {**base, "properties": {"name": {"type": "string"}}, "allOf": [{"$ref": "#/$defs/b"}]}
    assert _compile(constrain_tok, parts_first).matches_bytes(b'{"id":1,"name":"x"}')
    assert not _compile(constrain_tok, parts_first).matches_bytes(b'{"name":"x","id":1}')
    assert _compile(constrain_tok, own_first).matches_bytes(b'{"name":"x","id":1}')
    s = {"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["b"]}
    assert _compile(constrain_tok, s, key_order="required-first").matches_bytes(b'{"b":1,"a":2}')
    assert not _compile(constrain_tok, s, key_order="required-first").matches_bytes(b'{"a":2,"b":1}')


def test_choices_and_budget_errors(constrain_tok):
    with pytest.raises(ConstraintError, match="empty string"):
        compile_constraint(constrain_tok, choices=[""])
    with pytest.raises(ConstraintTooComplexError, match="too complex"):
        compile_constraint(constrain_tok, json_schema={"type": "string", "pattern": "(a|b)*a(a|b){14}c",
                                                       "maxLength": 3000}, budget_s=0.3, use_cache=False)


# --- the property test ---------------------------------------------------------------------
def check_sound(tok, schema, instances) -> int:
    """Compile `schema`; assert no instance jsonschema rejects is accepted. Returns how many
    instances were checked against a compiled constraint (0 if the schema was refused)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c = compile_constraint(tok, json_schema=schema, warm_up=False)
    except EmptyConstraintError:
        for v in instances:  # an empty language is right only if nothing is valid
            assert not validator(schema).is_valid(v), (schema, v)
        return 0
    except ConstraintError:
        return 0  # refused with a reason: sound by definition
    checker = validator(schema)
    order = SchemaOrder(schema)
    for v in instances:
        text = order.serialize(v)
        if c.matches_bytes(text.encode()):
            errors = [e.message for e in checker.iter_errors(json.loads(text))]
            # formats sgrun enforces are checked by jsonschema too; unknown ones are refused
            assert not errors, f"accepted an invalid instance: schema={schema} instance={text} errors={errors}"
    return len(instances)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(schema=SCHEMAS, instances=st.lists(VALUES, min_size=4, max_size=8))
def test_compiled_constraints_reject_what_jsonschema_rejects(constrain_tok, schema, instances):
    check_sound(constrain_tok, schema, instances)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(schema=SCHEMAS, instances=st.lists(VALUES, min_size=4, max_size=12))
def test_soundness_large_corpus(constrain_tok, schema, instances):
    check_sound(constrain_tok, schema, instances)


def test_isolated_compile_is_the_same_constraint(constrain_tok):
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 3}, "b": {"enum": ["x", "y"]}},
              "required": ["a"]}
    c = compile_constraint(constrain_tok, json_schema=schema, isolate=True, use_cache=False)
    assert c.matches_bytes(b'{"a":3,"b":"y"}') and not c.matches_bytes(b'{"a":2}')
    with pytest.raises(InvalidSchemaError, match="'required' at # must be a list"):
        compile_constraint(constrain_tok, json_schema={"required": 7}, isolate=True, use_cache=False)
    from sgrun.constrain.errors import UnsupportedSchemaError
    with pytest.raises(UnsupportedSchemaError) as info:
        compile_constraint(constrain_tok, json_schema={"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}},
                                                       "oneOf": [{"$ref": "#/$defs/t"},
                                                                 {"type": "array", "items": {"type": "array"}}]},
                           isolate=True, use_cache=False)
    assert info.value.keyword == "oneOf" and info.value.pointer == "#"
    t = time.perf_counter()
    with pytest.raises(ConstraintTooComplexError, match="too complex"):
        compile_constraint(constrain_tok, json_schema={"type": "string", "pattern": "(a|b)*a(a|b){14}c",
                                                       "maxLength": 3000}, budget_s=0.5, isolate=True, use_cache=False)
    assert time.perf_counter() - t < 5


def test_isolated_regex_and_choices(constrain_tok):
    c = compile_constraint(constrain_tok, regex="(yes|no), [0-9]{2}", isolate=True, use_cache=False)
    assert c.matches_bytes(b"yes, 12") and not c.matches_bytes(b"yes, 1")
    c = compile_constraint(constrain_tok, choices=["red", "green"], isolate=True, use_cache=False)
    assert c.matches_bytes(b"green") and not c.matches_bytes(b"blue")


def test_dependencies_conditionals_and_negations_by_exact_rewrites(constrain_tok):
    c = _compile(constrain_tok, {"type": "object", "properties": {"card": {"type": "string"},
                                                                   "billing": {"type": "string"}},
                                 "dependentRequired": {"card": ["billing"]}})
    assert c.matches_bytes(b'{"card":"1","billing":"x"}') and c.matches_bytes(b'{"billing":"x"}')
    assert not c.matches_bytes(b'{"card":"1"}')
    c = _compile(constrain_tok, {"type": "object", "properties": {"kind": {"enum": ["a", "b"]},
                                                                   "size": {"type": "integer"}},
                                 "required": ["kind"],
                                 "if": {"properties": {"kind": {"const": "a"}}},
                                 "then": {"required": ["size"]}, "else": {"properties": {"size": False}}})
    assert c.matches_bytes(b'{"kind":"a","size":3}') and not c.matches_bytes(b'{"kind":"a"}')
    assert c.matches_bytes(b'{"kind":"b"}') and not c.matches_bytes(b'{"kind":"b","size":3}')
    c = _compile(constrain_tok, {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                 "not": {"required": ["a", "b"]}})
    assert c.matches_bytes(b'{"a":1}') and c.matches_bytes(b"{}") and not c.matches_bytes(b'{"a":1,"b":2}')
    c = _compile(constrain_tok, {"dependencies": {"x": ["y"]}, "type": "object"})  # draft-4 spelling
    assert c.matches_bytes(b'{"y":1,"x":2}') and not c.matches_bytes(b'{"x":2}')
