"""Regex constraints: exact languages (incl. the outlines-core index defects), token masks that
agree with advance(), EOS/special-token rules, jump-forward, rollback, errors, and random
regexes checked against Python's re."""

from __future__ import annotations

import random
import re
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrain_fixtures import load_default_tokenizer, random_walk
from sgrun.constrain import (ConstraintTooComplexError, RegexError, apply_bitmask, compile_constraint,
                             unpack_bitmask)
from sgrun.errors import ConstraintError


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


# outlines-core 0.2.14's index drops transitions out of accepting states; we must not.
@pytest.mark.parametrize("pattern,text,ok", [
    (r"0(\.5)?", "0.5", True), (r"0(\.5)?", "0", True), (r"0(\.5)?", "0.", False),
    ("ab|abcd", "abcd", True), ("ab|abcd", "ab", True), ("ab|abcd", "abc", False),
    (r"[0-9]+(\.[0-9]+)?", "12.75", True), ("a*", "", True), ("(ab)+", "ababab", True),
    (r"\d{3}-\d{4}", "555-1234", True), (r"\d{3}-\d{4}", "555-123", False),
    ("héllo|wörld", "wörld", True), ("[^a-z]+", "ABC 12", True), ("[^a-z]+", "ABc", False),
])
def test_regex_language(tok, pattern, text, ok):
    assert compile_constraint(tok, regex=pattern).matches(text) is ok


def test_mask_agrees_with_advance_and_eos(tok):
    c = compile_constraint(tok, regex=r"(yes|no)( [0-9]{1,3})?")
    m = c.matcher()
    row = torch.zeros(c.table.words, dtype=torch.int32)
    m.fill_bitmask(row)
    allowed = unpack_bitmask(row, tok.vocab_size)
    assert not any(allowed[i] for i in tok.special_token_ids)
    sample = random.Random(0).sample(range(tok.vocab_size), 3000) + list(np.nonzero(allowed)[0])
    for t in sample:
        mm = c.matcher()
        assert mm.advance(t) == bool(allowed[t]), (t, tok.token_bytes[t])
    assert m.advance(tok.encode("yes")[0])
    m.fill_bitmask(row)
    allowed = unpack_bitmask(row, tok.vocab_size)
    eos = next(iter(tok.eos_token_ids))
    assert m.is_accepting() and allowed[eos]
    for piece in (" ", "1", "2"):
        assert m.advance(tok.encode(piece)[0]) and not m.is_terminated()
    assert m.advance(tok.encode("3")[0])
    assert m.is_terminated()  # three digits: nothing but EOS may follow


def test_eos_only_when_accepting(tok):
    c = compile_constraint(tok, regex="abc")
    m = c.matcher()
    eos = next(iter(tok.eos_token_ids))
    assert not m.advance(eos)
    row = torch.zeros(c.table.words, dtype=torch.int32)
    m.fill_bitmask(row)
    assert not unpack_bitmask(row, tok.vocab_size)[eos]


def test_forced_text_and_rollback(tok):
    c = compile_constraint(tok, regex=r"The answer is (42|43)\.")
    m = c.matcher()
    assert m.forced_text() == "The answer is 4"
    ids = tok.encode("The answer is 4")
    for t in ids:
        assert m.advance(t)
    assert m.forced_text() == ""
    m.rollback(len(ids))
    assert m.num_advanced == 0 and m.forced_text() == "The answer is 4"
    with pytest.raises(ValueError):
        m.rollback(1)


def test_apply_bitmask_rows_only(tok):
    c = compile_constraint(tok, regex="[ab]")
    m = c.matcher()
    vocab_width = tok.vocab_size + 64  # logits may be wider than the vocabulary
    logits = torch.zeros(3, vocab_width)
    masks = torch.full((3, c.table.words), -1, dtype=torch.int32)
    m.fill_bitmask(masks[1])
    apply_bitmask(logits, masks, torch.tensor([1]))
    assert torch.isfinite(logits[0]).all() and torch.isfinite(logits[2]).all()
    finite = torch.isfinite(logits[1]).nonzero().flatten().tolist()
    assert sorted(tok.token_bytes[i] for i in finite) == [b"a", b"b"]
    assert not torch.isfinite(logits[1, tok.vocab_size:]).any()


def test_cache_hit_is_fast(tok):
    compile_constraint(tok, regex="[a-z]{2,9}@example\\.com")
    t = time.perf_counter()
    for _ in range(100):
        compile_constraint(tok, regex="[a-z]{2,9}@example\\.com")
    assert (time.perf_counter() - t) / 100 < 1e-3


@pytest.mark.parametrize("bad", ["(ab", "a{2,1}", "(?=x)y", r"(a)\1", "*a", "[z-a]"])
def test_bad_regex(tok, bad):
    with pytest.raises(RegexError):
        compile_constraint(tok, regex=bad)


def test_explosion_is_bounded(tok):
    # (a|b)*a(a|b){n} needs 2^n DFA states. Compilation is lazy (instant); determinisation is
    # capped, so a run that keeps discovering states fails with a clear error instead of eating
    # memory. Nested counted repeats share one copy of their body (a counter, not an unrolled
    # copy per repeat); compile work past the budget is refused naming the budget.
    t = time.perf_counter()
    c = compile_constraint(tok, regex="(a|b)*a(a|b){22}", use_cache=False)
    assert time.perf_counter() - t < 1
    c.dfa.max_states = 3000
    rng = random.Random(0)
    m = c.matcher()
    with pytest.raises(ConstraintTooComplexError, match="states"):
        for _ in range(20_000):
            m.advance_text(rng.choice("ab"))
    t = time.perf_counter()
    c = compile_constraint(tok, regex="(a{1000}){1000}", use_cache=False, warm_up=False)
    assert time.perf_counter() - t < 2
    assert c.step_bytes(c.initial_state, b"a" * 5000) is not None and not c.matches_bytes(b"a" * 5000)
    assert not c.matches_bytes(b"b")
    huge = "(" + "|".join(f"x{i:05d}y" for i in range(40_000)) + ")"
    t = time.perf_counter()
    with pytest.raises(ConstraintTooComplexError, match="too complex.*0.2 s budget"):
        compile_constraint(tok, regex=huge, use_cache=False, budget_s=0.2)
    assert time.perf_counter() - t < 3


def test_errors_are_constraint_errors(tok):
    with pytest.raises(ConstraintError):
        compile_constraint(tok)
    with pytest.raises(ConstraintError):
        compile_constraint(tok, regex="a", choices=["a"])


def test_choices(tok):
    c = compile_constraint(tok, choices=["Paris", "London", "Lisbon"])
    assert c.matches("Lisbon") and not c.matches("Lis") and not c.matches("Rome")
    m = c.matcher()
    assert m.advance(tok.encode("L")[0])
    assert m.forced_text() == ""
    assert m.advance_text("o")
    assert m.forced_text() == "ndon"


# --- random regexes from a safe subset, walked by a random "model" ---------------------------
_atoms = st.sampled_from(["a", "b", "x", "[0-9]", "[a-c]", "\\.", " ", "é", "[^a-z\\n]", "\\d", "\\w"])


def _regex(depth: int = 0):
    rep = st.sampled_from(["", "?", "*", "+", "{1,3}", "{2}"])
    if depth >= 2:
        return st.builds(lambda a, r: f"(?:{a}){r}", _atoms, rep)
    sub = st.deferred(lambda: _regex(depth + 1))
    return st.one_of(
        st.builds(lambda a, r: f"(?:{a}){r}", _atoms, rep),
        st.builds(lambda xs: "".join(xs), st.lists(sub, min_size=1, max_size=4)),
        st.builds(lambda xs, r: f"(?:{'|'.join(xs)}){r}", st.lists(sub, min_size=2, max_size=3), rep),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=_regex(), seed=st.integers(0, 10_000))
def test_random_regex_walks_fullmatch(pattern, seed):
    tok = load_default_tokenizer()
    c = compile_constraint(tok, regex=pattern)
    data, _ = random_walk(c, tok, random.Random(seed), max_tokens=12)
    text = data.decode("utf-8")
    assert re.fullmatch(pattern, text, flags=re.ASCII), (pattern, text)
    assert c.matches(text) or tok.decode(tok.encode(text)) != text
