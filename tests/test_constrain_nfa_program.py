"""The NFA built in C++ from the program (native/nfa_build.cpp) against its Python replay
(nfa_program.ProgramNFA.build_lists, trimmed as ByteNFA.trim does), state for state; the
constraints it makes against the list-built ByteNFA's (SGRUN_NATIVE_NFA=0), mask for mask along
token walks; and the builder on hostile programs (errors, never a crash or a hang)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from constrain_fixtures import load_default_tokenizer
from exact_families import FAMILIES
from realworld_corpus import cases as realworld_cases
from schema_strategies import SCHEMAS as HYPOTHESIS_SCHEMAS
from sgrun.constrain import compile_constraint
from sgrun.constrain.byte_nfa import nfa_from_node
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.json_schema import schema_to_nfa
from sgrun.constrain.native_dfa import library
from sgrun.constrain.native_nfa import MAX_BUILD_STEPS, NativeNFA, new_program_nfa
from sgrun.constrain.nfa_program import OP_BYTES, OP_REP, NeedsListNFA, ProgramNFA
from sgrun.constrain.regex_parser import parse_regex
from sgrun.errors import ConstraintError



@pytest.fixture(autouse=True, scope="module")
def _native_library_built():
    """These tests compare the C++ build with the Python one: a C++ library that did not build is a
    failure here (CI and every supported machine have a compiler), never a silent skip."""
    assert library() is not None, "the C++ constraint library did not build (see the build log above)"

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string", "format": "date"}, "b": {"type": "integer"}}},
    {"type": "object", "properties": {"a": {"$ref": "#"}, "b": {"type": "string", "maxLength": 3000}}},
    {"$defs": {"n": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}},
     "$ref": "#/$defs/n"},
    {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},  # empty: no base case
    {"type": "object", "properties": {"a": False, "b": {"type": "string"}}},  # a dead member: the trim prunes
    {"type": "array", "items": {"type": "string", "pattern": "^[a-f0-9]{8}$"}, "maxItems": 40},
    {"anyOf": [{"type": "string", "minLength": 3, "maxLength": 2}, {"type": "null"}]},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2, "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}}, "minProperties": 1, "maxProperties": 1},
    {"type": "object", "patternProperties": {"^x-": {"type": "string"}}, "additionalProperties": {"type": "number"}},
    {"type": "string", "format": "email", "maxLength": 64},
    {"enum": ["a", 1, None, [1, 2], {"k": "v"}]},
    {"type": "array", "items": {"enum": ["x", "y", "z"]}, "uniqueItems": True},
    {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": 10}]},
    {"type": "object", "properties": {"é": {"type": "string", "pattern": "^[α-ω]+$"}}, "required": ["é"]},
]
REGEXES = [r"[a-z]{3,40}", r"(ab|cd)*e?", r"\d{1,3}(\.\d{1,3}){3}", r"[^\"]{0,200}", r"(x|y){2}z{5,}", "é+|ü?"]


def _lists_of(nfa: ProgramNFA, native: NativeNFA):
    a = native.export()
    n = native.num_states
    mask_of = {k: m for m, k in nfa._mask_id.items()}
    edges, eps, calls = [], [], []
    for s in range(n):
        edges.append([(1 << int(k) if k < 256 else mask_of[int(k)], int(t)) for k, t in
                      zip(a["edge_mid"][a["edge_off"][s]:a["edge_off"][s + 1]],
                          a["edge_tgt"][a["edge_off"][s]:a["edge_off"][s + 1]])])
        eps.append(a["eps_tgt"][a["eps_off"][s]:a["eps_off"][s + 1]].tolist())
        calls.append([(f, r) if kind == 2 else (f, r, lo, None if hi < 0 else hi)
                      for kind, f, r, lo, hi in a["call_data"][a["call_off"][s]:a["call_off"][s + 1]].tolist()])
    return edges, eps, calls, {int(f) for f in np.nonzero(a["nonempty"])[0]}


def _python_replay(nfa: ProgramNFA) -> tuple[ProgramNFA, set[int]]:
    """A second ProgramNFA over the same program (node trees kept, so fully_live decides as the
    list build would), built in Python and trimmed."""
    ref = ProgramNFA.__new__(ProgramNFA)
    ref.__dict__.update({k: v for k, v in nfa.__dict__.items() if k != "_built"})
    ref._built, ref.needs_trim = None, False
    ref.build_lists()
    return ref, ref.trim()


def assert_same_build(nfa: ProgramNFA) -> None:
    native_nonempty = nfa.trim()  # (the C++ build, pruned)
    edges, eps, calls, nonempty = _lists_of(nfa, nfa.native())
    assert nonempty == native_nonempty
    ref, ref_nonempty = _python_replay(nfa)
    assert len(edges) == len(ref.edges)
    assert edges == ref.edges
    assert eps == ref.eps
    assert calls == ref.calls
    assert nonempty == ref_nonempty


def _program_nfa(schema, **opts):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            nfa, root, _ = schema_to_nfa(schema, **opts)
        except ConstraintError:
            return None
    return nfa if isinstance(nfa, ProgramNFA) else None


@pytest.mark.parametrize("k", range(len(SCHEMAS)))
def test_the_cpp_build_equals_the_python_replay_on_test_schemas(k):
    nfa = _program_nfa(SCHEMAS[k])
    if nfa is not None:
        assert_same_build(nfa)


@pytest.mark.parametrize("pattern", REGEXES)
def test_the_cpp_build_equals_the_python_replay_on_regexes(pattern):
    nfa, _ = nfa_from_node(parse_regex(pattern).fullmatch_node(), new_program_nfa())
    assert isinstance(nfa, ProgramNFA)
    assert_same_build(nfa)


def _corpus_schemas():
    yield from ((c.schema, {}) for c in realworld_cases())
    yield from ((c.schema, {"key_order": c.key_order}) for family in FAMILIES.values() for c in family)


def test_the_cpp_build_equals_the_python_replay_on_a_third_of_the_corpus():
    built = 0
    for i, (schema, opts) in enumerate(_corpus_schemas()):
        nfa = _program_nfa(schema, **opts) if i % 3 == 0 else None
        if nfa is not None:
            assert_same_build(nfa)
            built += 1
    assert built > 30


@pytest.mark.slow
def test_the_cpp_build_equals_the_python_replay_on_the_realworld_and_exact_family_schemas():
    built = 0
    for schema, opts in _corpus_schemas():
        nfa = _program_nfa(schema, **opts)
        if nfa is not None:
            assert_same_build(nfa)
            built += 1
    assert built > 100


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(schema=HYPOTHESIS_SCHEMAS)
def test_the_cpp_build_equals_the_python_replay_on_generated_schemas(schema):
    nfa = _program_nfa(schema)
    if nfa is not None:
        assert_same_build(nfa)


def test_an_exactly_one_product_with_calls_compiles_on_the_list_build():
    # overlapping branches, one admitting any JSON value: the exact product keeps calls into
    # the any-value fragment and writes its states itself
    schema = {"oneOf": [{}, {"type": "array", "items": {"type": "integer"}}]}
    from sgrun.constrain.json_schema import SchemaCompiler
    with pytest.raises(NeedsListNFA):
        SchemaCompiler(schema, nfa=ProgramNFA()).compile_root()
    nfa, _, _ = schema_to_nfa(schema)
    assert not isinstance(nfa, ProgramNFA)
    c = compile_constraint(load_default_tokenizer(), json_schema=schema, use_cache=False)
    assert not c.matches("[1]") and c.matches('"x"') and c.matches('[1.5]')


def _allowed_along(c, text: str) -> list[frozenset[int]]:
    tok = load_default_tokenizer()
    state, out = c.initial_state, []
    for t in tok.encode(text, add_bos=False):
        out.append(frozenset(c.allowed_token_ids(state).tolist()))
        state = c.advance(state, t)
        assert state is not None
    out.append(frozenset(c.allowed_token_ids(state).tolist()))
    return out


def test_program_and_list_built_constraints_allow_the_same_tokens(monkeypatch):
    tok = load_default_tokenizer()
    walks = [(s, c.valid[0]) for s, c in [(c.schema, c) for c in realworld_cases()[:40:3]] if c.valid]
    walks += [({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}, "b": {"enum": [1, 2]}},
                "required": ["a"]}, {"a": "xy", "b": 2})]
    compared = 0
    for schema, value in walks:
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        got = {}
        for flag in ("1", "0"):
            monkeypatch.setenv("SGRUN_NATIVE_NFA", flag)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    c = compile_constraint(tok, json_schema=schema, use_cache=False)
                except ConstraintError:
                    got[flag] = None
                    continue
            if flag == "1" and not isinstance(c.dfa.nfa, ProgramNFA):
                break
            got[flag] = _allowed_along(c, text)
        if len(got) == 2:
            assert got["1"] == got["0"], schema
            compared += got["1"] is not None
    assert compared >= 10


# --- hostile programs ------------------------------------------------------------------------
class _Fake:
    """A ProgramNFA whose program() returns given buffers (the builder reads nothing else)."""

    def __init__(self, code, frags=1, defs=(0, 0, 0), pool=b"", max_states=400_000):
        self._code = code
        self.frag_start = list(range(0, 2 * frags, 2))
        self.max_states = max_states
        self.needs_trim = False
        self._p = {"code": np.array(code, dtype=np.int32), "pool": np.frombuffer(pool, dtype=np.uint8),
                   "words": ProgramNFA().program()["words"], "defs": np.array(defs, dtype=np.int32)}

    def program(self):
        return self._p


def test_the_builder_refuses_malformed_programs_and_caps_hostile_ones():
    nfa, _ = nfa_from_node(parse_regex(r"(ab|c[d-f]){2,9}x*").fullmatch_node(), new_program_nfa())
    good = nfa.program()
    rng = np.random.default_rng(0)
    for _ in range(300):  # corrupted programs: an error or a build, never a crash
        code = good["code"].copy()
        for i in rng.integers(0, len(code), size=3):
            code[i] = rng.choice([-1, 0, 1, 7, 255, 2**31 - 1, int(rng.integers(-5, 50))])
        fake = _Fake(code.tolist(), frags=len(nfa.frag_start), defs=good["defs"].tolist(), pool=bytes(nfa._pool))
        try:
            NativeNFA(fake)
        except (ValueError, ConstraintTooComplexError):
            pass
    # a child after its parent (a cycle), an out-of-range fragment, pool bytes past the end
    for code, pool in (([OP_REP, 0, 1, 2], b""), ([OP_BYTES, 0, 5], b"ab"), ([7, 9], b"")):
        with pytest.raises(ValueError, match="malformed"):
            NativeNFA(_Fake(code, defs=(0, 0, 0), pool=pool))
    # a repeat of nothing, 2^31 times: the step cap, not a hang
    with pytest.raises(ConstraintTooComplexError, match="step cap"):
        NativeNFA(_Fake([OP_BYTES, 0, 0, OP_REP, 0, 2**31 - 1, -1], defs=(0, 0, 3)))
    assert MAX_BUILD_STEPS < 2**31 - 1
    # a repeat of one byte past the state cap: the state cap's error
    with pytest.raises(ConstraintTooComplexError, match="exceeds 1000 NFA states"):
        NativeNFA(_Fake([OP_BYTES, 0, 1, OP_REP, 0, 5000, 5000], defs=(0, 0, 3), pool=b"a", max_states=1000))


@pytest.mark.parametrize("schema,text", [
    (SCHEMAS[1], '{"a":{"b":"xyz"},"b":"' + "q" * 40 + '"}'),
    (SCHEMAS[4], '{"b":"hi"}'),
    (SCHEMAS[9], '{"x-a":"s","n":1.5}'),
    (SCHEMAS[14], '{"é":"αβ"}'),
])
def test_the_automaton_over_the_cpp_build_equals_the_python_one_over_the_replay(schema, text):
    from sgrun.constrain.lazy_dfa import LazyDFA
    from sgrun.constrain.native_dfa import NativeLazyDFA
    nfa = _program_nfa(schema)
    root = 0
    nfa.trim()
    nat = NativeLazyDFA(nfa, root)  # reads the C++ arrays (the program NFA is not lists yet)
    assert not nfa.is_lists
    ref, _ = _python_replay(nfa)
    py = LazyDFA(ref, root)
    sp, sn = py.initial, nat.initial
    for b in text.encode():
        assert py._sets[sp] == nat._sets[sn]
        assert np.array_equal(py.row(sp)[py.class_of] == 0, nat.row(sn)[nat.class_of] == 0)
        sp, sn = py.step(sp, b), nat.step(sn, b)
        assert sp and sn
    assert py.accepting[sp] and nat.accepting[sn]


def test_a_program_nfa_from_the_worker_takes_a_reasoning_section():
    # the worker's NFA comes back as its program (pickled without the node trees); the caller
    # adds the reasoning fragment to it and builds it in C++
    tok = load_default_tokenizer()
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": False}, "required": ["a"]}
    c = compile_constraint(tok, json_schema=schema, isolate=True, use_cache=False, reasoning=("<think>", "</think>"),
                           budget_s=60)  # (a fresh worker imports sgrun inside its first budget)
    assert isinstance(c.dfa.nfa, ProgramNFA) and not c.dfa.nfa.is_lists
    assert c.matches('<think>hm</think>{"a":1}') and c.matches('{"a":2}')
    assert not c.matches('<think>hm</think>{"a":1,"b":2}') and not c.matches('<think>hm{"a":1}')


def test_a_request_never_builds_the_python_lists():
    # the masks, the output budget's distances and jump-forward all read the C++ arrays
    from sgrun.constrain.budget import budgeted_matcher
    tok = load_default_tokenizer()
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 40}, "b": {"type": "integer"}},
              "required": ["a"]}
    c = compile_constraint(tok, json_schema=schema, use_cache=False)
    m = budgeted_matcher(c, 64)()
    for t in tok.encode('{"a":"hello","b":12}', add_bos=False):
        assert t in set(m.allowed_token_ids().tolist())
        assert m.advance(t)
    assert m.is_accepting()
    c.forced_bytes(c.initial_state)
    assert isinstance(c.dfa.nfa, ProgramNFA) and not c.dfa.nfa.is_lists
