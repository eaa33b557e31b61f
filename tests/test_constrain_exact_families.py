"""The families enforced exactly instead of refused (oneOf with overlapping branches, `not` of
objects and arrays, if/then/else without a positive complement, uniqueItems over objects and
arrays, min/maxProperties above 64) and key_order="any": the hand-written cases of
benchmarks/exact_families.py, each label checked against jsonschema, each instance walked token
by token through the masks on the SmolLM2 tokenizer in both serializations (every token's bit
equals the automaton's step, EOS allowed exactly at an accepting end, and no state on the way
is a dead end), and what stays refused refused by the keyword's name and place."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constrain_fixtures import SchemaOrder, load_default_tokenizer
from schema_strategies import validator
from sgrun.constrain import compile_constraint
from sgrun.constrain.errors import UnsupportedSchemaError
from sgrun.constrain.exactly_one import CANONICAL_SPELLING
from sgrun.constrain.json_schema import canonical_numbers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from exact_families import FAMILIES, FamilyCase  # noqa: E402

CASES = [(family, case) for family, cases in FAMILIES.items() for case in cases]


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


def _compile(tok, case: FamilyCase, whitespace: str = "compact"):
    return compile_constraint(tok, json_schema=case.schema, key_order=case.key_order, whitespace=whitespace,
                              warm_up=False, use_cache=False)


def _text(case: FamilyCase, value, spaced: bool) -> str:
    v = canonical_numbers(value if case.key_order == "any" else SchemaOrder(case.schema).order(value))
    return json.dumps(v) if spaced else json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _walk(c, tok, text: str) -> bool:
    """Whether `text` is accepted, asserting on the way that every mask bit agrees with the
    automaton's step and that every state reached can still finish (a token or EOS allowed)."""
    eos = int(c.table.eos_ids[0])
    state = c.initial_state
    for t in tok.encode(text, add_bos=False):
        words = c.allowed_tokens(state).numpy()
        assert words.any(), f"dead end before {tok.decode([t])!r} in {text!r}"
        bit = bool((int(words[t >> 5]) >> (t & 31)) & 1)
        nxt = c.advance(state, t)
        assert bit == (nxt is not None), f"mask bit {bit} for {tok.decode([t])!r} in {text!r} disagrees with the step"
        if nxt is None:
            return False
        state = nxt
    words = c.allowed_tokens(state).numpy()
    assert words.any(), f"dead end at the end of {text!r}"
    eos_bit = bool((int(words[eos >> 5]) >> (eos & 31)) & 1)
    assert eos_bit == c.is_accepting(state)
    return eos_bit


@pytest.mark.parametrize("family, case", CASES, ids=[f"{f}: {c.name}" for f, c in CASES])
def test_hand_labels_agree_with_jsonschema(family, case):
    v = validator(case.schema)
    assert case.valid and case.invalid
    assert [x for x in case.valid if not v.is_valid(x)] == []
    assert [x for x in case.invalid if v.is_valid(x)] == []


@pytest.mark.parametrize("family, case", [(f, c) for f, c in CASES if c.refused is None],
                         ids=[f"{f}: {c.name}" for f, c in CASES if c.refused is None])
def test_instances_along_the_masks(tok, family, case):
    for spaced in (False, True):
        c = _compile(tok, case, "spaced" if spaced else "compact")
        for x in case.valid:
            assert _walk(c, tok, _text(case, x, spaced)), f"valid {x!r} rejected ({'spaced' if spaced else 'compact'})"
        for x in case.invalid:
            assert not _walk(c, tok, _text(case, x, spaced)), f"invalid {x!r} accepted"


@pytest.mark.parametrize("family, case", [(f, c) for f, c in CASES if c.refused is not None],
                         ids=[f"{f}: {c.name}" for f, c in CASES if c.refused is not None])
def test_what_stays_refused_is_named(tok, family, case):
    with pytest.raises(UnsupportedSchemaError) as info:
        _compile(tok, case)
    assert info.value.keyword == case.refused and info.value.pointer == "#"
    assert f"'{case.refused}' at #" in str(info.value)


def test_overlap_masks_follow_the_exactly_one_rule(tok):
    """Along '"ab' under oneOf [maxLength 3, pattern ^ab]: both branches hold after '"ab', so
    the closing quote is masked out there and allowed again once a fourth character makes the
    short branch fail."""
    c = compile_constraint(tok, json_schema={"oneOf": [{"type": "string", "maxLength": 3},
                                                       {"type": "string", "pattern": "^ab"}]},
                           warm_up=False, use_cache=False)
    quote = tok.encode('"', add_bos=False)
    assert len(quote) == 1
    state = c.initial_state
    for ch in '"ab':
        state = c.advance(state, tok.encode(ch, add_bos=False)[0])
    assert state is not None and c.advance(state, quote[0]) is None
    state = c.advance(c.advance(state, tok.encode("c", add_bos=False)[0]), tok.encode("d", add_bos=False)[0])
    assert c.advance(state, quote[0]) is not None


def test_lenient_keeps_oneof_as_anyof_where_it_stays_refused(tok):
    case = dict((c.name, c) for c in FAMILIES["oneOf-overlapping"])["a recursive tree against arrays of any arrays"]
    with pytest.warns(UserWarning, match="oneOf"):
        c = compile_constraint(tok, json_schema=case.schema, lenient=True, warm_up=False, use_cache=False)
    assert c.matches_bytes(b"[[]]") and any("'oneOf'" in w for w in c.warnings)


def test_key_order_any_takes_each_property_at_most_once(tok):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "additionalProperties": False}
    c = compile_constraint(tok, json_schema=schema, key_order="any", warm_up=False, use_cache=False)
    assert c.matches_bytes(b'{"b":1,"a":2}') and c.matches_bytes(b'{"a":1,"b":2}')
    assert not c.matches_bytes(b'{"a":1,"a":2}') and not c.matches_bytes(b'{"b":1,"a":2,"b":3}')
    schema_order = compile_constraint(tok, json_schema=schema, warm_up=False, use_cache=False)
    assert not schema_order.matches_bytes(b'{"b":1,"a":2}')


def test_key_order_is_checked(tok):
    from sgrun.constrain.errors import InvalidSchemaError
    with pytest.raises(InvalidSchemaError, match="key_order must be one of 'schema', 'required-first', 'any'"):
        compile_constraint(tok, json_schema={"type": "object"}, key_order="sorted", use_cache=False)


def test_exactly_one_takes_one_spelling_per_value(tok):
    """A value spelled another way (1.0, 1e5, an optional escape) could match a branch whose
    automaton does not read that spelling; inside an exactly-one product only json.dumps'
    spelling is written, so such a text is never counted for too few branches."""
    c = compile_constraint(tok, json_schema={"oneOf": [{"type": "number"}, {"type": "integer"}]},
                           warm_up=False, use_cache=False)
    assert c.matches_bytes(b"2.5") and c.matches_bytes(b"-0.125")
    for text in (b"2", b"2.0", b"2.50", b"1e5", b"1.5e2", b"-0"):
        assert not c.matches_bytes(text), text
    c = compile_constraint(tok, json_schema={"oneOf": [{"type": "string"}, {"type": "string", "pattern": "^a$"}]},
                           warm_up=False, use_cache=False)
    assert c.matches_bytes(b'"b"') and c.matches_bytes(b'"\\n"') and c.matches_bytes('"é"'.encode())
    assert c.matches_bytes(b'"\\u001f"')
    # "a" matches both; "\u0061" is "a" too; "\/" and "\u000a" are json.dumps-less spellings
    for text in (b'"a"', b'"\\u0061"', b'"\\/"', b'"\\u000a"', '"\\u00e9"'.encode()):
        assert not c.matches_bytes(text), text
    c = compile_constraint(tok, json_schema={"not": {"type": "integer"}}, warm_up=False, use_cache=False)
    assert c.matches_bytes(b"0.5") and c.matches_bytes(b'"x"') and not c.matches_bytes(b"3.0")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=6)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: "e" not in repr(x) and x == x),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(value=_JSON)
def test_canonical_spelling_accepts_what_json_dumps_writes(value):
    text = json.dumps(canonical_numbers(value), ensure_ascii=False, separators=(",", ":"))
    assert CANONICAL_SPELLING.fullmatch(text.encode()), text
    spaced = json.dumps(canonical_numbers(value), ensure_ascii=False)
    assert CANONICAL_SPELLING.fullmatch(spaced.encode()), spaced


@pytest.mark.parametrize("text", ['"\\u0061"', '"\\/"', '"\\u000a"', '"\\u00e9"', "1.0", "1e5", "-0", "2.50", "01"])
def test_canonical_spelling_refuses_other_spellings(text):
    assert not CANONICAL_SPELLING.fullmatch(text.encode())


def test_finite_words_spells_a_finite_language_and_refuses_an_infinite_one():
    from sgrun.constrain.byte_dfa import dfa_from_node, finite_words
    from sgrun.constrain.regex_parser import parse_regex
    assert finite_words(dfa_from_node(parse_regex("(ab|c)d?").fullmatch_node()), 10) == [b"ab", b"abd", b"c", b"cd"]
    assert finite_words(dfa_from_node(parse_regex("[a-z]{2}").fullmatch_node()), 100) is None  # 676 > cap
    assert finite_words(dfa_from_node(parse_regex("a+").fullmatch_node()), 100) is None


@pytest.mark.parametrize("family, name", [("oneOf-overlapping", "closed records with overlapping enums"),
                                          ("not-object-array", "objects other than two listed values"),
                                          ("oneOf-overlapping", "any value or an integer array")])
def test_random_walks_through_the_masks_never_dead_end(tok, family, name):
    """Tokens drawn at random from each mask: every state reached still allows a token or EOS,
    and every walk that ends at EOS is valid."""
    import random
    case = {c.name: c for c in FAMILIES[family]}[name]
    c = _compile(tok, case)
    v = validator(case.schema)
    eos = int(c.table.eos_ids[0])
    rng = random.Random(7)
    for _ in range(12):
        state, out = c.initial_state, []
        for _ in range(40):
            words = c.allowed_tokens(state).numpy()
            allowed = [w * 32 + b for w in range(len(words)) if words[w] for b in range(32) if (int(words[w]) >> b) & 1]
            assert allowed, f"dead end after {tok.decode(out)!r}"
            t = rng.choice(allowed)
            if t == eos:
                assert v.is_valid(json.loads(tok.decode(out))), tok.decode(out)
                break
            out.append(t)
            state = c.advance(state, t)
            assert state is not None
