"""The compile shortcuts of the lazy automaton construction give the same automata as the
plain constructions they replace: the mask-level escape lift, the node-level liveness check
that lets trim skip its graph pass, and shared embedded DFAs."""

from __future__ import annotations

import json
import random

import pytest

from sgrun.constrain.byte_dfa import product
from sgrun.constrain.byte_nfa import ByteNFA
from sgrun.constrain.json_schema import schema_to_nfa
from sgrun.constrain.json_string import MAX_WIDE_KEYS, any_text_dfa, escape_lift, excluded_dfa, length_dfa
from sgrun.constrain.lazy_dfa import LazyDFA
from sgrun.constrain.regex_ast import NOTHING, alt, lit, rep, seq
from sgrun.constrain.string_formats import FORMAT_REGEXES
from sgrun.constrain.string_leaf import format_dfa, pattern_search_dfa

PATTERNS = ["^ORD-[0-9]{6}$", "abc", "^[a-z]+$", r"\\n", "[\"\\\\]", "^.{2,5}$", "\t", "^[^a-z]*$", "é", "^$"]


def _decoded_dfas():
    yield from (pattern_search_dfa(p) for p in PATTERNS)
    yield from (format_dfa(f) for f in sorted(FORMAT_REGEXES))
    yield excluded_dfa(any_text_dfa(), ["name", "age", "naming", 'x"y', "a\\b", "\n", "/"])
    yield length_dfa(2, 7)


def _escapings(text: str, rng: random.Random) -> list[str]:
    """Several JSON escapings of `text` (raw, \\u plus four hex digits of BMP characters in either hex case,
    json.dumps' default, short escapes)."""
    short = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    outs = [json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1]]
    for _ in range(3):
        parts = []
        for ch in text:
            k = rng.random()
            if k < 0.3 and ord(ch) < 0x10000:  # any BMP character (json.dumps writes non-ASCII so)
                code = f"{ord(ch):04x}"
                parts.append("\\u" + (code.upper() if k < 0.15 else code))
            elif ch in short and (k < 0.7 or ch in '"\\' or ord(ch) < 0x20):
                parts.append(short[ch])
            elif ord(ch) < 0x20:
                parts.append(f"\\u{ord(ch):04x}")
            else:
                parts.append(ch)
        outs.append("".join(parts))
    return outs


@pytest.mark.parametrize("k", range(len(PATTERNS) + len(FORMAT_REGEXES) + 2))
def test_escape_lift_accepts_exactly_the_escapings_of_accepted_text(k):
    decoded = list(_decoded_dfas())[k]
    lifted = escape_lift(decoded)
    rng = random.Random(k)
    alphabet = 'abcxyzORD-0123456789 "\\/\n\t\x01é€@.:ß中'
    texts = ["", "name", "naming", "ab", "ORD-123456", 'x"y', "a\\b", "\n", "abc", "2024-02-29", "a@b.co"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(8))) for _ in range(150)]
    # \\u escapes of non-ASCII characters are lifted for up to MAX_WIDE_KEYS distinct non-ASCII
    # edge sets (a bound on the lift's cost): past it only soundness holds for those escapes
    wide_sets = {tuple((m >> 0x80, t) for m, t in row if m >> 0x80) for row in decoded.edges} - {()}
    complete = len(wide_sets) <= MAX_WIDE_KEYS
    for text in texts:
        want = decoded.fullmatch(text.encode("utf-8"))
        for escaped in _escapings(text, rng):
            got = lifted.fullmatch(escaped.encode("utf-8"))
            if complete or not _escapes_non_ascii(escaped):
                assert got == want, (text, escaped)
            else:
                assert want or not got, (text, escaped)


def _escapes_non_ascii(escaped: str) -> bool:
    """Whether a JSON string body writes some non-ASCII character as a \\u escape."""
    i = 0
    while i < len(escaped):
        if escaped[i] == "\\":
            if escaped[i + 1] == "u" and int(escaped[i + 2:i + 6], 16) >= 0x80:
                return True
            i += 6 if escaped[i + 1] == "u" else 2
        else:
            i += 1
    return False


def test_escape_lift_rejects_bad_escapes():
    lifted = escape_lift(any_text_dfa())
    for bad in ['"', "\\", "\\x41", "\\u00", "\\u004", "\\u0g41", "\x01", "\\a"]:
        assert not lifted.fullmatch(bad.encode()), bad
    assert lifted.fullmatch(b"\\u0041\\u000A\\n") and lifted.fullmatch(b"\\u00e9\\u4E2D\\u07ff\\uffff")
    assert not lifted.fullmatch(b"\\ud83d")  # a lone surrogate is no character (pairs are not lifted)


def _alive_everywhere(nfa: ByteNFA) -> bool:
    """Every state reachable from a fragment start (calls return to their return state) can
    reach its fragment's end; unreachable leftovers of a construction do not matter."""
    alive = nfa._alive()
    seen = set(nfa.frag_start)
    todo = list(seen)
    while todo:
        s = todo.pop()
        for t in [t for _, t in nfa.edges[s]] + nfa.eps[s] + [c[1] for c in nfa.calls[s]]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return all(alive[s] for s in seen)


SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string", "format": "date"}, "b": {"type": "integer"}}},
    {"type": "object", "properties": {"a": {"$ref": "#"}, "b": {"type": "string", "maxLength": 3000}}},
    {"$defs": {"n": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}},
     "$ref": "#/$defs/n"},
    {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},  # empty: no base case
    {"type": "object", "properties": {"a": False, "b": {"type": "string"}}},
    {"type": "array", "items": {"type": "string", "pattern": "^[a-f0-9]{8}$"}, "maxItems": 40},
    {"anyOf": [{"type": "string", "minLength": 3, "maxLength": 2}, {"type": "null"}]},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2, "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}}, "minProperties": 1, "maxProperties": 1},
]


@pytest.mark.parametrize("k", range(len(SCHEMAS)))
def test_fully_live_agrees_with_the_graph_pass(k):
    try:
        nfa, root, _ = schema_to_nfa(SCHEMAS[k])
    except Exception:  # noqa: BLE001 - a refusal is fine; there is nothing to compare
        return
    if nfa.fully_live():
        assert _alive_everywhere(nfa)


def test_fully_live_spots_dead_parts_and_recursion_without_a_base():
    nfa = ByteNFA(share=True)
    f = nfa.new_fragment()
    nfa.define_fragment(f, seq(lit("a"), ("call", f)))  # a+ forever: empty
    assert not nfa.fully_live() and not _alive_everywhere(nfa)
    nfa = ByteNFA(share=True)
    f = nfa.new_fragment()
    nfa.define_fragment(f, alt(lit("x"), seq(lit("["), ("call", f), lit("]"))))  # nested brackets: live
    assert nfa.fully_live() and _alive_everywhere(nfa)
    nfa = ByteNFA(share=True)
    f = nfa.new_fragment()
    nfa.define_fragment(f, rep(("byteset", 0), 0, None))  # optional dead loop body
    assert not nfa.fully_live()
    assert NOTHING == seq(lit("a"), NOTHING)


def test_trim_result_and_shared_dfas_give_the_same_language():
    """An NFA that embeds one big DFA twice (shared as one fragment) accepts what the DFA does."""
    d = escape_lift(pattern_search_dfa("^[a-z]{2,6}-[0-9]+$"))
    nfa = ByteNFA(share=True)
    root = nfa.new_fragment()
    nfa.define_fragment(root, seq(("dfa", d), lit(","), ("dfa", d)))
    assert root in nfa.trim()
    assert len(nfa.frag_start) == 2  # the DFA became one shared fragment
    lazy = LazyDFA(nfa, root)
    for text, ok in [(b"ab-1,cd-22", True), (b"ab-1,", False), (b"a-1,ab-1", False), (b"abcdef-9,zz-0", True)]:
        s = lazy.initial
        for b in text:
            s = lazy.step(s, b)
        assert bool(s and lazy.accepting[s]) == ok, text
    assert not product(d, d, "minus").accepting


def test_byte_classes_equal_the_partition_by_mask_membership():
    from sgrun.constrain.lazy_dfa import byte_classes
    rng = random.Random(0)
    for _ in range(200):
        masks: set[int] = set()
        for _ in range(rng.randrange(30)):
            r = rng.random()
            if r < 0.4:
                masks.add(1 << rng.randrange(256))
            elif r < 0.5:
                masks.add((1 << 256) - 1)
            else:
                lo = rng.randrange(256)
                hi = rng.randrange(lo, 256)
                masks.add(((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1))
        by_signature: dict[tuple, int] = {}
        for b in range(256):
            key = tuple(sorted(m for m in masks if m >> b & 1))
            by_signature[key] = by_signature.get(key, 0) | 1 << b
        assert byte_classes(masks) == sorted(by_signature.values(), key=lambda c: (c & -c).bit_length())


@pytest.mark.parametrize("regex, good, bad", [
    ("(ab){10,12}", ["ab" * 10, "ab" * 12], ["ab" * 9, "ab" * 13, "ab" * 10 + "a"]),
    ("(ab){7,}", ["ab" * 7, "ab" * 40], ["ab" * 6, ""]),
    ("((ab){6}c){6,8}", [("ab" * 6 + "c") * 6, ("ab" * 6 + "c") * 8], [("ab" * 6 + "c") * 5, ("ab" * 6 + "c") * 9]),
    ("x(a?){0,9}y", ["xy", "x" + "a" * 9 + "y"], ["x" + "a" * 10 + "y"]),
])
def test_counted_repeats(regex, good, bad):
    from sgrun.constrain.byte_nfa import nfa_from_node
    from sgrun.constrain.regex_parser import parse_regex
    nfa, root = nfa_from_node(parse_regex(regex).fullmatch_node())
    assert root in nfa.trim()
    lazy = LazyDFA(nfa, root)

    def accepts(text: str) -> bool:
        s = lazy.initial
        for b in text.encode():
            s = lazy.step(s, b)
        return bool(s) and lazy.accepting[s]
    assert all(accepts(t) for t in good) and not any(accepts(t) for t in bad)


def test_length_bounds_are_counters_not_states():
    nfa, root, _ = schema_to_nfa({"type": "object", "properties": {
        f"p{i}": {"type": "string", "minLength": 2, "maxLength": 4096 + i} for i in range(10)}})
    assert len(nfa.edges) < 2000  # unrolled, each bound was ~8k states
    lazy = LazyDFA(nfa, root)

    def accepts(value: str) -> bool:
        s = lazy.initial
        for b in json.dumps({"p3": value}, separators=(",", ":")).encode():
            s = lazy.step(s, b)
        return bool(s) and lazy.accepting[s]
    assert accepts("ab") and accepts("é" * 4099) and not accepts("a") and not accepts("x" * 4100)
    assert accepts("\n" * 4099) and not accepts("\n" * 4100)  # an escape is one character
