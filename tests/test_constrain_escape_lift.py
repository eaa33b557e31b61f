"""The escape lift in C++ (constrain/native/escape_lift.cpp) against json_string.escape_lift_uncached,
the Python reference: the same trimmed DFA, state for state and edge for edge, on every shape a
compile lifts (an open object's "any key but these", formats, patterns, length bounds, enum
exclusions), on names with escapes and non-ASCII characters, past the 8 non-ASCII edge sets the
lift covers, and on languages that are empty. And the lifted automaton means what it should: a
declared name is refused in every spelling JSON allows, other names are taken."""

from __future__ import annotations

import json
import random

import pytest

from sgrun.constrain.byte_dfa import ByteDFA, dfa_from_node
from sgrun.constrain.json_string import (_lift, any_text_dfa, escape_lift_uncached, excluded_dfa, length_product)
from sgrun.constrain.native_dfa import library, native_enabled, native_escape_lift
from sgrun.constrain.regex_ast import NOTHING
from sgrun.constrain.regex_parser import parse_regex
from sgrun.constrain.string_leaf import format_dfa, pattern_search_dfa


@pytest.fixture(scope="module", autouse=True)
def _native_built():
    assert library() is not None, "the constraint library did not build (g++ is installed where the tests run)"
    assert native_enabled()


def _same_as_python(d: ByteDFA) -> ByteDFA:
    want, got = escape_lift_uncached(d), _lift(d)
    assert got.start == want.start == 0
    assert got.accepting == want.accepting
    assert got.edges == want.edges
    assert got.__dict__.get("_fully_live") is (True if got.accepting else None)
    return got


NAMES = ["name", "description", "location", "unit", "temperature", "date_from", "date_to", "include_forecast"]


@pytest.mark.parametrize("names", [
    NAMES,
    ["a", "ab", "abc", ""],                                  # prefixes of each other, and the empty key
    ['quo"te', "back\\slash", "tab\there", "nl\n", "/"],     # names whose JSON spelling needs escapes
    ["ключ", "名前", "é", "a\u00ff", "\u0800x", "\uffff"],    # 2- and 3-byte characters
    ["x\U0001F600", "\U0010FFFF"],                            # 4-byte characters (not \\u-lifted: surrogates)
])
def test_key_exclusions_match_the_reference(names):
    _same_as_python(excluded_dfa(any_text_dfa(), names))


@pytest.mark.parametrize("make", [
    lambda: any_text_dfa(),
    lambda: format_dfa("email"),
    lambda: format_dfa("uri"),
    lambda: format_dfa("date-time"),
    lambda: length_product(any_text_dfa(), 2, 20),             # one non-ASCII edge set per count: past 8
    lambda: length_product(format_dfa("hostname"), 0, 40),
    lambda: pattern_search_dfa("^[a-zé]+[0-9]{2}$"),
    lambda: dfa_from_node(parse_regex("[^a]*").fullmatch_node()),
    lambda: excluded_dfa(format_dfa("email"), ["a@b.co", "ä@b.co"]),
], ids=["any", "email", "uri", "date-time", "length", "hostname-length", "pattern", "negated-class", "enum-excluded"])
def test_string_leaves_match_the_reference(make):
    _same_as_python(make())


def test_the_first_eight_non_ascii_edge_sets_are_lifted_and_no_more():
    """States 0-9 read `a` to the next and `é`'s lead byte to a state of their own (10-19), so each
    has its own non-ASCII edges, in state order: the lift covers those of states 0-7 (MAX_WIDE_KEYS)."""
    lead, cont = 1 << 0xC3, sum(1 << b for b in range(0x80, 0xC0))
    edges = [[(1 << ord("a"), s + 1), (lead, 10 + s)] for s in range(9)] + [[(lead, 19)]]
    edges += [[(cont, min(s + 1, 9))] for s in range(10)]
    d = ByteDFA(edges, set(range(10)))
    lifted = _same_as_python(d)
    assert lifted.fullmatch(b"aaaaaaa\\u00e9")       # from state 7: the eighth set
    assert not lifted.fullmatch(b"aaaaaaaa\\u00e9")  # from state 8: the ninth, left raw-only (sound)
    assert lifted.fullmatch("aaaaaaaaé".encode())


def test_random_name_sets_match_the_reference():
    rng = random.Random(23)
    alphabet = list("abcdez_-0129 ") + ['"', "\\", "\n", "\x01", "é", "ß", "中", "€", "\U0001F600"]
    for _ in range(40):
        names = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) for _ in range(rng.randint(1, 12))]
        _same_as_python(excluded_dfa(any_text_dfa(), names))


def test_an_empty_language_lifts_to_the_empty_dfa():
    got = _same_as_python(dfa_from_node(NOTHING))
    assert not got.accepting and got.edges == [[]]
    assert native_escape_lift([[]], set(), 0) is None  # a start that cannot accept


def test_malformed_input_raises_instead_of_crashing():
    with pytest.raises(TypeError):
        native_escape_lift([[("x", 0)]], {0}, 0)
    with pytest.raises(ValueError):
        native_escape_lift([[(1 << 97, 5)]], {0}, 0)
    with pytest.raises(ValueError):
        native_escape_lift([[]], {3}, 0)


def test_the_lifted_key_exclusion_refuses_every_spelling_of_a_declared_name():
    names = ["name", "größe", "tab\t"]
    lifted = _lift(excluded_dfa(any_text_dfa(), names))

    def accepts(body: str) -> bool:
        return lifted.fullmatch(body.encode())

    for n in names:
        for spelled in (json.dumps(n, ensure_ascii=False)[1:-1], json.dumps(n)[1:-1],
                        "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c for c in n),
                        "".join(f"\\u{ord(c):04X}" for c in n)):
            assert not accepts(spelled), spelled
    for other in ("nam", "names", "Name", "grösse", "tab", "\\u006eame2"):
        assert accepts(other), other
