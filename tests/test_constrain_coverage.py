"""The keywords of issue 13 item 3, each checked against `jsonschema` on a fixed set
of instances: every accepted instance must be valid (soundness) and the valid ones the
construction is meant to cover must be accepted (coverage)."""

from __future__ import annotations

import json
import warnings

import jsonschema
import pytest

from constrain_fixtures import load_default_tokenizer
from sgrun.constrain import compile_constraint
from sgrun.constrain.errors import EmptyConstraintError
from sgrun.errors import ConstraintError


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


def _compile(tok, schema, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile_constraint(tok, json_schema=schema, warm_up=False, use_cache=False, **kw)


def _check(tok, schema, instances, must_accept=()):
    """No invalid instance accepted; every instance in must_accept (valid ones) accepted."""
    c = _compile(tok, schema)
    v = jsonschema.Draft202012Validator(schema)
    for inst in instances:
        text = json.dumps(inst, separators=(",", ":"))
        if c.matches_bytes(text.encode()):
            assert v.is_valid(inst), f"{schema}: accepted invalid {text}"
    for inst in must_accept:
        assert v.is_valid(inst)
        assert c.matches_bytes(json.dumps(inst, separators=(",", ":")).encode()), f"{schema}: rejected {inst}"


OBJECTS = [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {"a": 1, "x": 1}, {"x": 1}, {"x": 1, "y": 2},
           {"a": 1, "b": 2, "x": 3}, {"x": 1, "y": 2, "z": 3}, {"a": "s"}, {"a": 1, "b": 2, "x": 3, "y": 4}]


@pytest.mark.parametrize("lo, hi", [(1, None), (None, 1), (1, 2), (2, None), (2, 3), (None, 0)])
@pytest.mark.parametrize("base", [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}}, "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}}, "required": ["a"]},
    {"type": "object", "additionalProperties": {"type": "integer"}},
])
def test_min_max_properties_count_members(tok, base, lo, hi):
    s = dict(base)
    if lo is not None:
        s["minProperties"] = lo
    if hi is not None:
        s["maxProperties"] = hi
    try:
        c = _compile(tok, s)
    except EmptyConstraintError:
        assert not any(jsonschema.Draft202012Validator(s).is_valid(o) for o in OBJECTS)
        return
    except ConstraintError as e:
        # only the documented refusal: repeated extra keys cannot be told apart
        assert "distinct" in str(e) and "properties" not in base
        return
    del c
    wanted = [o for o in OBJECTS if jsonschema.Draft202012Validator(s).is_valid(o)
              and sum(k not in ("a", "b") for k in o) <= 1]  # extras count once toward minProperties
    _check(tok, s, OBJECTS, wanted if lo is None or lo <= 1 or "properties" in base else [])


def test_min_properties_one_on_a_map(tok):
    s = {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1, "maxProperties": 2}
    c = _compile(tok, s)
    assert not c.matches_bytes(b"{}") and c.matches_bytes(b'{"k":"v"}') and c.matches_bytes(b'{"k":"v","l":"w"}')
    assert not c.matches_bytes(b'{"k":"v","l":"w","m":"x"}')


def test_min_properties_needing_distinct_extra_keys_is_refused_or_loosened(tok):
    s = {"type": "object", "minProperties": 2}
    with pytest.raises(ConstraintError, match="minProperties"):
        _compile(tok, s)
    c = _compile(tok, s, lenient=True)
    assert any("'minProperties'" in w for w in c.warnings) and c.matches_bytes(b'{"a":1,"b":2}')


ARRAYS = [[], ["a"], ["a", "a"], ["a", "b"], ["b", "a"], ["a", "b", "c"], ["a", "b", "a"], [True], [True, False],
          [True, True], [1], [1, 2], [1, 1], [None], [None, None], [1, 2, 3, 4], ["c", "b", "a"], [3, 1, 2]]


@pytest.mark.parametrize("items", [
    {"enum": ["a", "b", "c"]}, {"type": "boolean"}, {"type": ["boolean", "null"]},
    {"type": "integer", "minimum": 1, "maximum": 4}, {"$ref": "#/$defs/c"},
    {"anyOf": [{"const": "a"}, {"enum": ["b", 1]}]}, {"type": "string", "enum": ["a", "b", 1]},
])
@pytest.mark.parametrize("bounds", [{}, {"minItems": 1}, {"maxItems": 2}])
def test_unique_items_over_small_domains(tok, items, bounds):
    s = {"$defs": {"c": {"enum": ["a", "b", "c"]}}, "type": "array", "uniqueItems": True, "items": items, **bounds}
    v = jsonschema.Draft202012Validator(s)
    _check(tok, s, ARRAYS, [a for a in ARRAYS if v.is_valid(a)])


def test_unique_items_elsewhere_is_refused_with_the_reason(tok):
    with pytest.raises(ConstraintError, match="uniqueItems.*admit unboundedly many"):
        _compile(tok, {"type": "array", "uniqueItems": True, "items": {"type": "string"}})
    c = _compile(tok, {"type": "array", "uniqueItems": True, "items": {"type": "string"}}, lenient=True)
    assert any("'uniqueItems'" in w for w in c.warnings)
    c = _compile(tok, {"type": "array", "uniqueItems": True, "items": {"enum": list(range(12))}})
    assert c.matches_bytes(json.dumps(list(range(12))).replace(" ", "").encode()) and not c.matches_bytes(b"[3,3]")


def test_many_pattern_properties(tok):
    pp = {f"^{ch}": {"type": "integer"} for ch in "abcdefghij"}
    pp["^x-"] = {"type": "string"}
    pp["b$"] = {"minimum": 5}
    insts = [{"a1": 1}, {"a1": "x"}, {"x-y": "s"}, {"x-y": 1}, {"ab": 4}, {"ab": 6}, {"zzb": 3}, {"zzb": "q"},
             {"q": 1}, {"j": 2}]
    for extra in ({}, {"additionalProperties": False}):
        s = {"type": "object", "patternProperties": pp, **extra}
        v = jsonschema.Draft202012Validator(s)
        _check(tok, s, insts, [i for i in insts if v.is_valid(i)])


SCALARS = [0, -0.0, 1, 2, 2.5, 3, -1, 100, 0.5, True, False, None, "a", "b", [], {}]


@pytest.mark.parametrize("neg", [{"const": 1}, {"enum": [1, 2.5]}, {"const": 0}, {"const": True},
                                 {"enum": [True, False]}, {"const": None}, {"enum": ["a", 1, None]}])
@pytest.mark.parametrize("base", [{}, {"type": "number"}, {"type": "integer", "minimum": 0, "maximum": 200},
                                  {"type": ["boolean", "string"]}])
def test_not_of_scalar_values(tok, base, neg):
    s = {**base, "not": neg}
    v = jsonschema.Draft202012Validator(s)
    # valid integral floats (-0.0) are outside the integer output form: not required
    _check(tok, s, SCALARS, [x for x in SCALARS if v.is_valid(x) and not isinstance(x, float)
                             or (isinstance(x, float) and v.is_valid(x) and "integer" not in str(base))])


def test_not_const_number_subtracts_every_spelling(tok):
    c = _compile(tok, {"type": "number", "not": {"const": 1}})
    for text in (b"1", b"1.0", b"1.000", b"10e-1", b"1e0", b"0.1e1"):
        assert not c.matches_bytes(text)
    for text in (b"2", b"-1", b"1.5", b"11", b"10"):
        assert c.matches_bytes(text)
    c = _compile(tok, {"type": "number", "not": {"const": 0}})
    assert not any(c.matches_bytes(t) for t in (b"0", b"-0", b"0.0", b"-0.00")) and c.matches_bytes(b"0.5")


@pytest.mark.parametrize("schema, instances", [
    ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, [{"a": 1}, {"b": 1}, {"a": 1, "b": 1}, {}, "x"]),
    ({"$defs": {"A": {"required": ["a"]}}, "type": "object", "properties": {"a": {"type": "integer"}},
      "oneOf": [{"$ref": "#/$defs/A"}, {"required": ["b"]}]}, [{"a": 1}, {"b": 1}, {"a": 1, "b": 1}, {"a": "s"}]),
    ({"oneOf": [{"type": "string", "maxLength": 3}, {"type": "string", "minLength": 2}]}, ["a", "ab", "abcd"]),
    ({"oneOf": [{"type": "number", "minimum": 0}, {"type": "number", "maximum": 10}]}, [-1, 0, 5, 10, 11, "x"]),
    ({"oneOf": [{"properties": {"kind": {"enum": ["a", "b"]}}, "required": ["kind"]},
                {"properties": {"kind": {"const": "b"}}, "required": ["kind"]}]},
     [{"kind": "a"}, {"kind": "b"}, {"kind": "c"}]),
    ({"if": {"const": 5}, "then": {"type": "integer"}, "else": {"type": "string"}}, [5, "x", 6, None]),
    ({"type": "object", "if": {"properties": {"kind": {"const": 1}}, "required": ["kind"]},
      "then": {"required": ["a"]}, "else": {"required": ["b"]}},
     [{"kind": 1, "a": 2}, {"kind": 2, "b": "x"}, {"kind": 1, "b": "x"}, {"a": 1}]),
    ({"not": {"minimum": 0, "exclusiveMaximum": 5}}, [-1, 0, 5, 4.5, "x"]),
    ({"not": {"type": "array", "minItems": 1, "maxItems": 2}}, [[], [1], [1, 2], [1, 2, 3], "x"]),
])
def test_oneof_made_exclusive_and_negated_bounds(tok, schema, instances):
    v = jsonschema.Draft202012Validator(schema)
    _check(tok, schema, instances, [i for i in instances if v.is_valid(i)])


def test_overlapping_oneof_without_a_complement_is_exact(tok):
    # (no positive complement of a pattern: built as exactly one branch, exactly_one.py)
    schema = {"oneOf": [{"type": "string"}, {"type": "string", "pattern": "^a"}]}
    _check(tok, schema, ["b", "a", "ab", "", "ba"], ["b", "", "ba"])


NUMBER_TEXTS = ["0", "-0.0", "1e-05", "-1e-05", "1.5e-07", "1e+20", "-1e+20", "0.5", "1", "1.0", "2.5", "100", "-3",
                "1e+16", "9.99e-05", "1e-5", "1e20", "1E5", "0e5", "-0e0", "0.0e-3", "5e-1", "1e0", "10e-1", "0.5e1",
                "9e-00", "2e-1", "12e-1", "0.001e3",
                # beyond float64: a validator reads these as 0.0 / inf (found by the random-walk test)
                "8787597E-1784", "1e-400", "1e400", "-1e400", "0.00000001e-320", "123456789e300"]


@pytest.mark.parametrize("bounds, must_accept", [
    ({"minimum": 0}, ["1e-05", "1.5e-07", "1e+20", "1e+16", "0e5"]), ({"exclusiveMinimum": 0}, ["1e-05", "1e+20"]),
    ({"minimum": 0, "maximum": 1}, ["1e-05", "1e-5"]), ({"minimum": 0, "exclusiveMaximum": 1}, ["1e-05"]),
    ({"maximum": 0}, ["-1e-05", "-1e+20"]), ({"exclusiveMaximum": 0}, ["-1e+20"]),
    ({"minimum": -1, "maximum": 1}, ["1e-05", "0e0"]), ({"minimum": 1}, ["1e+20", "1e+16"]),
    ({"maximum": 100}, ["1e-05", "9.99e-05", "-1e+20"]), ({"minimum": 0.5, "maximum": 2}, []),
    ({"minimum": -5, "maximum": -1}, []), ({"exclusiveMinimum": 0, "maximum": 1.5}, ["1e-05"]),
])
def test_bounded_numbers_take_serializers_exponent_forms(tok, bounds, must_accept):
    """Python prints 1e-05 and 1e+16, serde 1e-5 and 1e16: a bounded number accepts those
    spellings where its interval holds every value they can stand for and each mantissa is an
    in-range number itself, and nothing else."""
    s = {"type": "number", **bounds}
    c = _compile(tok, s)
    v = jsonschema.Draft202012Validator(s)
    for t in NUMBER_TEXTS:
        if c.matches_bytes(t.encode()):
            assert v.is_valid(json.loads(t)), f"{s} accepted {t}"
    for t in must_accept:
        assert v.is_valid(json.loads(t)) and c.matches_bytes(t.encode()), f"{s} rejected {t}"


def test_exponent_forms_open_no_dead_end_mantissa(tok):
    """Under maximum 1.5 no mantissa above the bound may start (a model sampling `2.3...`
    could only end it with an exponent: it ran to max_tokens at temperature 1.5)."""
    c = _compile(tok, {"type": "number", "exclusiveMinimum": 0, "maximum": 1.5})
    m = c.matcher()
    assert not m.advance_text("2")
    m = c.matcher()
    assert m.advance_text("1") and not m.advance_text(".7")


def test_keywords_follow_the_declared_draft(tok):
    """A keyword the declared draft lacks is an annotation there (jsonschema ignores it): a
    draft-04 `const` validates nothing, so a oneOf over it must not act as if it did."""
    d4 = "http://json-schema.org/draft-04/schema#"
    c = _compile(tok, {"$schema": d4, "type": "object", "properties": {"a": {"const": 1}}})
    assert c.matches_bytes(b'{"a":2}')
    s = {"$schema": d4, "oneOf": [{"type": "string", "pattern": "^a"}, {"const": "b"}]}
    c = _compile(tok, s)  # branch 1 is {} in draft 4: exactly one branch is "not a string starting with a"
    v = jsonschema.Draft4Validator(s)
    for inst in ("b", "ab", "a", 3, None):
        assert c.matches_bytes(json.dumps(inst).encode()) == v.is_valid(inst), inst
    d7 = "http://json-schema.org/draft-07/schema#"
    s = {"$schema": d7, "type": "object", "dependentRequired": {"a": ["b"]}, "if": {"required": ["x"]},
         "then": {"required": ["y"]}}
    c = _compile(tok, s)
    v = jsonschema.Draft7Validator(s)
    for inst in ({"a": 1}, {"x": 1}, {"x": 1, "y": 2}):
        assert c.matches_bytes(json.dumps(inst, separators=(",", ":")).encode()) == v.is_valid(inst)


def test_iglu_self_describing_schemas_compile_as_draft_04(tok):
    s = {"$schema": "http://iglucentral.com/schemas/com.snowplowanalytics.self-desc/schema/jsonschema/1-0-0#",
         "self": {"vendor": "com.example", "name": "e", "format": "jsonschema", "version": "1-0-0"},
         "type": "object", "properties": {"n": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
         "additionalProperties": False}
    c = _compile(tok, s)
    assert c.matches_bytes(b'{"n":1}') and not c.matches_bytes(b'{"n":0}') and not c.matches_bytes(b'{"x":1}')
    with pytest.raises(ConstraintError, match="meta-schema"):
        _compile(tok, {"$schema": "https://example.invalid/my-meta.json", "type": "string"})


@pytest.mark.parametrize("schema, instances", [
    ({"oneOf": [{"type": "integer", "minimum": 0, "maximum": 2}, {"enum": ["off", "warn", "error"]},
                {"type": "array"}]}, [0, 2, 3, "off", "on", [], {}]),
    ({"oneOf": [{"type": "string", "pattern": "^\\d+%$"}, {"const": "auto"}]}, ["80%", "auto", "80", 1]),
    ({"oneOf": [{"const": False}, {"type": "object"}]}, [False, True, {}, None]),
    ({"type": "object", "properties": {"env": {"enum": ["dev", "prod", "test"]}, "debug": {"type": "boolean"}},
      "allOf": [{"if": {"properties": {"env": {"const": "prod"}}}, "then": {"properties": {"debug": {"const": False}}}},
                {"if": {"properties": {"env": {"enum": ["dev"]}}}, "then": {"required": ["debug"]}}]},
     [{"env": "prod", "debug": True}, {"env": "prod", "debug": False}, {"env": "dev"}, {"env": "test"}, {}]),
])
def test_exclusive_value_branches_and_negated_property_tests(tok, schema, instances):
    v = jsonschema.Draft202012Validator(schema)
    _check(tok, schema, instances, [i for i in instances if v.is_valid(i)])


def test_not_of_a_property_type_test(tok):
    s = {"type": "object", "not": {"properties": {"status": {"const": "cancelled"}, "fee": {"type": "object"}},
                                   "required": ["fee", "status"]}}
    # (a negated branch names only the key it tests: the other keys follow it, as additional ones)
    _check(tok, s, [{"status": "cancelled", "fee": {}}, {"fee": {}, "status": "cancelled"}, {"fee": 1, "status": "x"}],
           [{"fee": 1, "status": "cancelled"}, {}, {"status": "ok", "fee": {}}])


def test_a_tightened_max_length_that_leaves_no_string_is_refused_as_too_complex_not_empty(tok):
    """A pattern whose automaton times maxLength is too big to build gets a smaller maxLength
    (above); when even the largest bound that builds is shorter than any string of the pattern
    (here 5, against 12 characters at least), the schema is satisfiable but the bound admits
    nothing: it was refused as "admits no output at all" (until commit 4c3e810); now as too complex, naming
    maxLength."""
    from sgrun.constrain.errors import ConstraintTooComplexError
    schema = {"type": "string", "pattern": "(a|b)*a(a|b){10}c", "maxLength": 3000}
    with pytest.raises(ConstraintTooComplexError, match="maxLength 3000 at # together with its pattern"):
        compile_constraint(tok, json_schema=schema, use_cache=False, warm_up=False, budget_s=None)


def test_format_with_a_large_max_length(tok):
    """Snowplow-style leaves: a format under maxLength 4096. uuid's own length already meets the
    bound (no counter); a uri's exact product is too big, so a smaller bound is enforced (sound,
    with a warning naming it); date-time and email compile instead of being refused."""
    c = _compile(tok, {"type": "string", "format": "uuid", "maxLength": 4096})
    assert c.matches_bytes(b'"123e4567-e89b-12d3-a456-426614174000"') and not c.warnings
    c = _compile(tok, {"type": "string", "format": "uri", "maxLength": 4096})
    assert c.matches_bytes(b'"https://example.org/a"') and not c.matches_bytes(b'"not a uri"')
    assert any("maxLength 4096" in w for w in c.warnings)
    assert not c.matches_bytes(('"https://e.org/' + "a" * 4100 + '"').encode())
    for fmt, ok in (("date-time", b'"2024-01-01T00:00:00Z"'), ("email", b'"a@example.org"')):
        c = _compile(tok, {"type": "string", "format": fmt, "maxLength": 4096, "minLength": 2})
        assert c.matches_bytes(ok) and not c.matches_bytes(b'"x"')
