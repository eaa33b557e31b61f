"""Fast token masks (sparse walk, shared region memo, text chain + special tokens, split, numpy walk) must equal the plain
whole-vocabulary walk in every state, for schemas, regexes and grammars; the strategies
themselves are counted, so each one is exercised. These are the Python automaton's strategies
(the fallback where the C++ one does not build), so the module runs with SGRUN_NATIVE_DFA=0;
the tests marked `both` also run on the C++ automaton, whose own tests are
test_constrain_native_dfa.py."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from constrain_fixtures import load_default_tokenizer
from sgrun.constrain import compile_constraint
from sgrun.constrain.mask_builder import pack, walk
from sgrun.constrain.region_memo import region_memo
from sgrun.constrain.token_table import token_table

SPECS = [
    {"json_schema": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                                      "tags": {"type": "array", "items": {"type": "string"}},
                                                      "n": {"type": "integer", "minimum": -5, "maximum": 300}},
                     "required": ["name"]}},
    {"json_schema": {"type": "object", "properties": {"email": {"type": "string", "format": "email"},
                                                      "note": {"type": ["string", "null"], "minLength": 2}}},
     "whitespace": "flexible"},
    {"regex": r"[A-Z][a-z ]{0,20}\.( [A-Z][a-z]+)*"},
    {"regex": r"\"([^\"\\]|\\.)*\"(,\"[0-9]+\")?"},
    {"grammar": "json"},
    {"grammar": "sql_select"},
]


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


@pytest.fixture(autouse=True)
def python_automaton(request, monkeypatch):
    """The Python automaton, or (for tests parametrized with native=True) the C++ one."""
    native = request.node.callspec.params.get("native", False) if hasattr(request.node, "callspec") else False
    monkeypatch.setenv("SGRUN_NATIVE_DFA", "1" if native else "0")
    if native:
        from sgrun.constrain.native_dfa import library
        assert library() is not None, "the C++ lazy DFA did not build"
    return native


def _reference(c, state: int) -> np.ndarray:
    return pack(walk(c.dfa, c.table, c.dfa.class_of[c.table.node_byte].astype(np.int64), state), c.table.words)


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: next(iter(s)) + ":" + str(next(iter(s.values())))[:30])
def test_fast_masks_equal_reference_walk(tok, spec, native):
    c = compile_constraint(tok, use_cache=False, **spec)
    rng = random.Random(5)
    checked = 0
    for _ in range(3):
        m = c.matcher()
        for _ in range(14):
            state = m.state
            fast = c.builder.packed(state)
            assert np.array_equal(fast, _reference(c, state)), f"mask differs in state {state}"
            checked += 1
            ids = c.allowed_token_ids(state)
            if not len(ids):
                break
            # prefer short tokens half the time so strings and lists get long enough to matter
            if rng.random() < 0.5:
                short = ids[[len(tok.token_bytes[i]) <= 2 for i in ids]]
                ids = short if len(short) else ids
            assert m.advance(int(ids[rng.randrange(len(ids))]))
    assert checked >= 10
    assert sum(c.builder.stats.values()) >= checked


def test_text_chain_counts_length_bounds(tok):
    c = compile_constraint(tok, json_schema={"type": "string", "maxLength": 5}, use_cache=False)
    m = c.matcher()
    assert m.advance_text('"ab')
    ids = c.allowed_token_ids(m.state)
    texts = [tok.token_bytes[i] for i in ids]
    assert all(len(t.split(b'"')[0].decode("utf-8", "replace")) <= 3 for t in texts if b"\\" not in t)
    assert any(len(t) == 3 and t.isalpha() for t in texts) and not any(len(t) == 4 and t.isalpha() for t in texts)
    assert c.builder.stats["chain"] >= 1


@pytest.mark.parametrize("prefix,strategy", [
    ('{"', "split"),                     # a declared name or any other property name
    ('{"name":"x\\', "sparse"),          # escape: letters re-enter the string body
    ('{"name":"x\\u00', "sparse"),       # \u code: hex digits, then the string body
    ('{"extra":', "sparse"),             # any JSON value: few first bytes
])
def test_split_and_subtree_shortcuts_exact(tok, prefix, strategy):
    c = compile_constraint(tok, json_schema={"type": "object", "properties": {"name": {"type": "string"}}},
                           use_cache=False, warm_up=False)
    m = c.matcher()
    assert m.advance_text(prefix)
    before = dict(c.builder.stats)
    fast = c.builder.packed(m.state)
    assert c.builder.stats[strategy] == before[strategy] + 1, c.builder.stats
    assert np.array_equal(fast, _reference(c, m.state))


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_warm_up_covers_a_tool_call(tok, native):
    schema = {"type": "object", "properties": {
        "tool": {"enum": ["get_weather", "search"]}, "city": {"type": "string", "maxLength": 40},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["tool", "city"], "additionalProperties": False}
    c = compile_constraint(tok, json_schema=schema, use_cache=False, warm_up=False)
    assert c.warm_up(budget_s=30.0, max_states=5000, dense=True) > 20
    computed = sum(c.builder.stats.values())
    m = c.matcher()
    row = np.zeros(c.table.words, dtype=np.int32)
    out = torch.from_numpy(row)
    for t in tok.encode('{"tool":"search","city":"Lisbon, Portugal","days":3}'):
        m.fill_bitmask(out)
        assert m.advance(t)
    assert m.is_accepting()
    assert sum(c.builder.stats.values()) == computed, "a mask on the request's path was not precomputed"


def test_region_memo_is_shared_across_constraints_and_exact(tok):
    """Two different schemas' string bodies have the same local region: the second one's mask
    comes from the memo (a hit, no new entry), and both equal the reference walk."""
    memo = region_memo(token_table(tok))
    masks = []
    for schema, prefix in (({"type": "object", "properties": {"city": {"type": "string"}}}, '{"city":"Lis'),
                           ({"type": "array", "items": {"type": "string"}}, '["a","b\\n')):
        c = compile_constraint(tok, json_schema=schema, use_cache=False, warm_up=False)
        m = c.matcher()
        assert m.advance_text(prefix)
        hits, misses = memo.hits, memo.misses
        fast = c.builder.packed(m.state)
        assert c.builder.stats["region"] == 1
        assert memo.hits == hits + 1 and memo.misses == misses, "a string body was not a memo hit"
        assert np.array_equal(fast, _reference(c, m.state))
        masks.append(fast)
    assert not np.array_equal(masks[0], masks[1]), "what follows the quote differs: so must the masks"


def test_split_of_an_open_object_with_many_names_is_exact(tok):
    """An open object's key state with many declared names: the odd first letters' subtrees go
    through the restricted numpy walk (SPLIT_PYTHON_TOKENS), still exact."""
    names = ["name", "version", "description", "scripts", "dependencies", "devDependencies", "main", "license",
             "author", "keywords", "repository", "bugs", "homepage", "engines", "files", "type"]
    schema = {"type": "object", "properties": {n: {"type": "string"} for n in names}}
    c = compile_constraint(tok, json_schema=schema, use_cache=False, warm_up=False)
    for prefix in ('{"', '{"name":"x","', '{"name":"x","d'):
        m = c.matcher()
        assert m.advance_text(prefix)
        fast = c.builder.packed(m.state)
        assert np.array_equal(fast, _reference(c, m.state)), prefix
    assert c.builder.stats["split"] >= 2
