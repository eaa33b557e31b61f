"""The C++ lazy DFA (native_dfa.py over lazy_dfa_core.cpp) against the Python LazyDFA it stands in
for: along byte paths of many schemas and regexes, both automata must hold the same
configurations, accept in the same states, and give the same token masks; the error caps must
raise the same errors; and the mask walk's trie must handle ids that share their bytes."""

from __future__ import annotations

import json
import pickle
import random
from types import SimpleNamespace

import numpy as np
import pytest

from constrain_fixtures import load_default_tokenizer
from sgrun.constrain.compile_worker import build_nfa
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.lazy_dfa import LazyDFA
from sgrun.constrain.mask_builder import MaskBuilder, pack, walk
from sgrun.constrain.native_dfa import NativeLazyDFA, NativeTrie, library
from sgrun.constrain.token_table import token_table

# (kind, spec, texts that are valid): counted repeats, formats, $ref recursion, open objects with
# many declared names, patterns, unicode, escapes, alternatives
CASES = [
    ("json_schema", {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 12}, "tags": {"type": "array", "items": {"type": "string"},
                                                             "maxItems": 3},
        "n": {"type": "integer", "minimum": -5, "maximum": 300}}, "required": ["name"]},
     ['{"name":"ab\\"c","tags":["x","y"],"n":-3}', '{"name":""}']),
    ("json_schema", {"type": "object", "properties": {"email": {"type": "string", "format": "email"},
                                                      "when": {"type": "string", "format": "date-time"},
                                                      "host": {"type": "string", "format": "hostname"}}},
     ['{"email":"bob@example.org","when":"2024-05-01T10:30:00Z","host":"api.example.org"}']),
    ("json_schema", {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
        "$ref": "#/$defs/node"},
     ['{"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]}']),
    ("json_schema", {"type": "object", "properties": {k: {"type": "string"} for k in
                                                      ("name", "namespace", "labels", "annotations", "nodeName", "uid")},
                     "additionalProperties": {"type": ["number", "boolean", "null"]}},
     ['{"name":"web","labels":"x","nam":1.5,"zz":true,"uidx":null}']),
    ("json_schema", {"type": "object", "properties": {
        "schedule": {"type": "string", "pattern": "^(rate|cron)\\(.*\\)$"},
        "city": {"type": "string", "minLength": 2, "maxLength": 40}}},
     ['{"schedule":"rate(5 minutes)","city":"Zürich \\u00e9"}']),
    ("json_schema", {"anyOf": [{"type": "string", "enum": ["get_weather", "search"]},
                               {"type": "array", "items": {"type": "number"}, "minItems": 2}]},
     ['"search"', "[1.5,-2e3]"]),
    # the walk's narrower byte categories (URI-unreserved, alphanumeric, lowercase, digits,
    # uppercase), each under a length bound the shortcut must respect
    ("json_schema", {"type": "object", "properties": {
        "url": {"type": "string", "format": "uri"}, "pkg": {"type": "string", "pattern": "^[a-z0-9-]{1,12}$"},
        "cur": {"type": "string", "pattern": "^[A-Z]{3}$"}, "pin": {"type": "string", "pattern": "^[0-9]{4,8}$"},
        "code": {"type": "string", "pattern": "^[A-Za-z0-9]{2,6}$"}, "iban": {"type": "string", "minLength": 8,
                                                                          "maxLength": 34}}},
     ['{"url":"https://ex-ample.org/a_b/c~d.html?q=1","pkg":"left-pad2","cur":"EUR","pin":"20481","code":"Ab3",'
      '"iban":"DE89370400440532013000"}']),
    ("regex", r"[A-Z][a-z ]{0,20}\.( [A-Z][a-z]+)*", ["Hello world. Again"]),
    ("regex", r"(ab|a)*b{2,5}c?", ["abababbb", "aabbc"]),
]


@pytest.fixture(scope="module")
def table():
    assert library() is not None, "the C++ lazy DFA did not build (g++ is installed where the tests run)"
    return token_table(load_default_tokenizer())


def _nfa(kind, spec):
    if kind == "json_schema":
        return build_nfa(kind, spec, {})[:2]
    return build_nfa(kind, spec, {})[:2]


def _reference(dfa, table, state):
    return pack(walk(dfa, table, dfa.class_of[table.node_byte].astype(np.int64), state), table.words)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}:{json.dumps(c[1])[:40]}")
def test_native_automaton_equals_the_python_one_along_valid_and_random_paths(table, case):
    kind, spec, texts = case
    nfa, root = _nfa(kind, spec)
    py, nat = LazyDFA(nfa, root), NativeLazyDFA(nfa, root)
    py_masks = MaskBuilder(py, table)
    rng = random.Random(11)
    checked = 0
    for text in texts:
        data = text.encode()
        for trial in range(3):  # the valid text, then two random walks off its prefixes
            sp, sn = py.initial, nat.initial
            cut = len(data) if trial == 0 else rng.randrange(len(data) + 1)
            path = list(data[:cut]) + [rng.randrange(256) for _ in range(0 if trial == 0 else 6)]
            for k, b in enumerate(path + [None]):
                assert py._sets[sp] == nat._sets[sn], f"configurations differ after {bytes(path[:k])!r}"
                assert py.accepting[sp] == nat.accepting[sn]
                mask = nat.native_mask(sn, table)
                assert np.array_equal(mask, py_masks.packed(sp)), f"mask differs after {bytes(path[:k])!r}"
                if checked % 3 == 0:
                    assert np.array_equal(mask, _reference(nat, table, sn))
                assert np.array_equal(py.row(sp) == 0, nat.row(sn) == 0)
                checked += 1
                if b is None:
                    break
                sp, sn = py.step(sp, b), nat.step(sn, b)
                assert (sp == 0) == (sn == 0)
                if sp == 0:
                    break
            if trial == 0:
                assert nat.accepting[sn], f"{text!r} is valid"
                assert nat.step_bytes(nat.initial, data) == sn
    assert checked > 20


@pytest.mark.parametrize("case,prefix", [(0, b'{"name":"a'), (6, b'{"url":"https://ex'), (6, b'{"pin":"20')])
def test_successors_cover_the_states_allowed_tokens_end_in(table, case, prefix):
    nfa, root = _nfa(*CASES[case][:2])
    nat = NativeLazyDFA(nfa, root)
    s = nat.step_bytes(nat.initial, prefix)
    ends: set[int] = set()
    mask = nat.native_mask(s, table, ends)
    ids = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))
    reached = {nat.step_bytes(s, table.token_bytes[i]) for i in ids[:: max(1, len(ids) // 500)]}
    assert reached - {0} <= ends


def test_text_runs_shortcut_respects_length_bounds(table):
    nfa, root = _nfa("json_schema", {"type": "string", "maxLength": 5})
    nat = NativeLazyDFA(nfa, root)
    s = nat.step_bytes(nat.initial, b'"ab')
    ids = np.flatnonzero(np.unpackbits(nat.native_mask(s, table).view(np.uint8), bitorder="little"))
    texts = [table.token_bytes[i] for i in ids]
    assert any(len(t) == 3 and t.isalpha() for t in texts)
    assert not any(len(t) == 4 and t.isalpha() for t in texts)
    assert np.array_equal(nat.native_mask(s, table), _reference(nat, table, s))


def test_caps_raise_the_python_automatons_errors(monkeypatch):
    nfa, root = _nfa("regex", r"[ab]{0,50}c")  # a state per count
    for cls in (LazyDFA, NativeLazyDFA):
        dfa = cls(nfa, root, max_states=6)
        with pytest.raises(ConstraintTooComplexError, match="exceeds 6 states"):
            s = dfa.initial
            for b in b"ababababab":
                s = dfa.step(s, b)
        assert dfa.exhausted
    # a left-recursive fragment closes over ever deeper stacks until the closure cap (lowered
    # here: the Python automaton hashes its linked-tuple stacks, quadratic at the real cap)
    import sgrun.constrain.lazy_dfa as lazy_dfa
    import sgrun.constrain.native_dfa as native_dfa
    monkeypatch.setattr(lazy_dfa, "_MAX_CLOSURE", 2000)
    monkeypatch.setattr(native_dfa, "_MAX_CLOSURE", 2000)
    from sgrun.constrain.byte_nfa import ByteNFA
    from sgrun.constrain.regex_ast import alt, lit, seq
    rec = ByteNFA(share=True)
    f = rec.new_fragment()
    rec.define_fragment(f, alt(seq(("call", f), lit("x")), lit("y")))
    with pytest.raises(ConstraintTooComplexError) as py_err:
        LazyDFA(rec, f, max_depth=100_000)
    with pytest.raises(ConstraintTooComplexError) as nat_err:
        NativeLazyDFA(rec, f, max_depth=100_000)
    assert str(py_err.value) == str(nat_err.value)


def test_trie_keeps_every_id_that_shares_its_bytes():
    token_bytes = [b"ab", b"a", b"ab", b"abc", b"b\xc3", b"", b"zz"]
    fake = SimpleNamespace(token_ids=np.array([0, 1, 2, 3, 4, 6]), token_bytes=token_bytes, words=1)
    trie = NativeTrie(fake)
    nfa, root = _nfa("regex", "a[bc]*")
    nat = NativeLazyDFA(nfa, root)
    words = np.zeros(1, dtype=np.int32)
    library().sgrun_dfa_mask(nat._h, trie.handle, nat.initial, words.ctypes.data, None, 0)
    got = {i for i in range(7) if (int(words[0]) >> i) & 1}
    assert got == {0, 1, 2, 3}


def test_pickled_automaton_is_rebuilt_over_the_same_nfa(table):
    nfa, root = _nfa(*CASES[2][:2])
    nat = NativeLazyDFA(nfa, root)
    again = pickle.loads(pickle.dumps(nat))
    data = CASES[2][2][0].encode()
    assert again.accepting[again.step_bytes(again.initial, data)]


def test_a_failed_build_falls_back_to_the_python_automaton(monkeypatch, tmp_path, caplog):
    from sgrun.constrain.native_dfa import SOURCES
    from sgrun.kernels.cpu.build import SharedLibrary
    monkeypatch.setenv("SGRUN_FAIL_TEST_LIB", "1")
    lib = SharedLibrary("lazy_dfa_core_test", SOURCES, what="the C++ lazy DFA", fallback="the Python one serves",
                        fail_env="SGRUN_FAIL_TEST_LIB")
    with caplog.at_level("WARNING"):
        assert lib.load() is None
    assert "the Python one serves" in caplog.text
    import sgrun.constrain.native_dfa as nd
    monkeypatch.setenv("SGRUN_NATIVE_DFA", "0")
    nfa, root = _nfa("regex", "ab+")
    assert type(nd.make_lazy_dfa(nfa, root)) is LazyDFA
    monkeypatch.setenv("SGRUN_NATIVE_DFA", "1")
    assert type(nd.make_lazy_dfa(nfa, root)) is NativeLazyDFA


@pytest.mark.parametrize("schema", [
    CASES[0][1], CASES[2][1],
    # uniqueItems over a small domain: its NFA was once built by a closure that called itself
    {"type": "array", "items": {"enum": ["a", "b", "c", "d"]}, "uniqueItems": True, "maxItems": 3},
])
def test_a_dropped_constraint_leaves_no_cyclic_garbage(schema):
    """A compiled constraint, its automaton and its NFA are freed by reference counting alone, also
    after a request's budget matcher used it: a cycle among them (the automaton's helpers holding
    it, a ctypes cast per call, a recursive closure in the compiler, the budget's helpers stored on
    the constraint and holding it) left 10^4-10^5 objects per compile for the cyclic GC, whose
    pauses then landed inside later requests' compiles and masks."""
    import gc
    import warnings

    from sgrun.constrain import compile_constraint
    from sgrun.constrain.budget import budgeted_matcher
    tok = load_default_tokenizer()
    with warnings.catch_warnings():   # once first: one-time caches (tokenizer tables, the library) fill here
        warnings.simplefilter("ignore")
        compile_constraint(tok, json_schema=schema, use_cache=False).matcher().allowed_token_ids()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)   # what the collector finds stays in gc.garbage, to be named
    gc.garbage.clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c = compile_constraint(tok, json_schema=schema, use_cache=False)
        text = ('["a","c"]' if schema.get("type") == "array" else
                '{"name":"x"}' if "properties" in schema else '{"v":1}')
        m = budgeted_matcher(c, 64)()   # what engine.submit makes: the output budget's matcher
        for t in tok.encode(text, add_bos=False):  # the hot path: a mask, then an advance, per token
            assert t in set(m.allowed_token_ids().tolist())
            assert m.advance(t)
        assert m.is_accepting()
        del c, m
        gc.collect()
        # Only the constraint's own objects count: threads an earlier test left running (an
        # engine, a server) may make garbage of their own while the collector is off.
        ours = [o for o in gc.garbage if _is_constraint_object(o)]
        assert ours == [], f"{len(ours)} objects of the constraint are cyclic garbage, e.g. {ours[:3]!r}"[:500]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _is_constraint_object(o) -> bool:
    """An instance, function or cell of the constraint compiler, or a ctypes object or array type
    (the casts, the views)."""
    import ctypes
    import types
    if isinstance(o, types.FunctionType):
        return (o.__module__ or "").startswith("sgrun.constrain")
    if isinstance(o, types.CellType):
        try:
            return _is_constraint_object(o.cell_contents)
        except ValueError:
            return False
    if isinstance(o, (ctypes._Pointer, ctypes._SimpleCData, ctypes.Array)):
        return True
    if isinstance(o, type) and issubclass(o, ctypes.Array):  # an array type made per call (the table view)
        return True
    return type(o).__module__.startswith("sgrun.constrain")
