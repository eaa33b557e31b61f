"""The Earley path: grammars LALR(1) cannot run (ambiguous, reduce/reduce, more lookahead,
keywords inside names) are accepted with exact masks. The oracle is lark's own Earley parser with
lexer="dynamic_complete" (every split of the text into terminals; on these grammars our
longest-match lexer gives the same language, which is the point of the test): by brute force over every short string of a small alphabet, we accept exactly the strings lark
parses, every state we keep alive reaches a string lark parses, and token masks equal the
brute-force set of tokens whose bytes keep the automaton alive."""

from __future__ import annotations

import itertools
import random

import pytest
from lark import Lark
from lark.exceptions import LarkError

from constrain_fixtures import load_default_tokenizer, random_walk
from sgrun.constrain import ConstraintTooComplexError, GrammarError, compile_constraint

# name -> (grammar, alphabet, brute-force length)
EARLEY_GRAMMARS = {
    "more_lookahead": ('start: a "y" "z" | b "y" "w"\na: "x"\nb: "x"\n', "xyzw", 5),
    "ambiguous_expr": ('start: expr\nexpr: expr "+" expr | expr "*" expr | "(" expr ")" | NUMBER\n'
                       'NUMBER: /[0-9]+/\n', "1+*()", 6),
    "reduce_reduce": ('start: item+\nitem: word | phrase\nphrase: word word\nword: "a" | "b" | "ab"\n', "ab", 7),
    "shift_reduce_loses_sentences": ('start: x "c"\nx: "a" | "a" "c" "c"\n', "ac", 6),
    "nullable_and_ignore": ('start: x x "c" | x "d"\nx: "a"? NAME?\nNAME: /[ab]+/\n%ignore " "\n', "ab cd", 5),
    "keyword_and_name": ('start: stmt+\nstmt: "if" NAME | NAME "=" NAME | NAME NAME | NAME\nNAME: /[a-z]+/\n%ignore " "\n',
                         "if =", 5),
}


def lark_oracle(grammar: str) -> Lark:
    return Lark(grammar, parser="earley", lexer="dynamic_complete")


def oracle_accepts(parser: Lark, text: str) -> bool:
    try:
        parser.parse(text)
        return True
    except LarkError:
        return False


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


def _walk(c, text: bytes) -> int | None:
    return c.step_bytes(c.initial_state, text)


def _completion(c, state: int, alphabet: bytes, depth: int = 8) -> bytes | None:
    """Shortest string over the alphabet that takes `state` to acceptance (BFS)."""
    frontier = [(state, b"")]
    seen = {state}
    for _ in range(depth):
        nxt = []
        for s, w in frontier:
            if c.is_accepting(s):
                return w
            for b in alphabet:
                t = c.step_bytes(s, bytes([b]))
                if t is not None and t not in seen:
                    seen.add(t)
                    nxt.append((t, w + bytes([b])))
        frontier = nxt
    return next((w for s, w in frontier if c.is_accepting(s)), None)


@pytest.mark.parametrize("name", sorted(EARLEY_GRAMMARS))
def test_earley_language_equals_lark_by_brute_force(tok, name):
    grammar, alphabet, length = EARLEY_GRAMMARS[name]
    with pytest.raises(LarkError):  # these really are beyond LALR(1)
        Lark(grammar, parser="lalr", strict=True)
    c = compile_constraint(tok, grammar=grammar, use_cache=False)
    assert c.path == "earley"
    oracle = lark_oracle(grammar)
    accepted = 0
    for n in range(length + 1):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            state = _walk(c, text.encode())
            ours = state is not None and c.is_accepting(state)
            assert ours == oracle_accepts(oracle, text), (name, text, ours)
            accepted += ours
            if state is not None and not ours:  # alive: some completion must be a sentence
                w = _completion(c, state, alphabet.encode())
                assert w is not None and oracle_accepts(oracle, text + w.decode()), (name, text, w)
    assert accepted > 0


@pytest.mark.parametrize("name,prefix", [("ambiguous_expr", "(1+"), ("reduce_reduce", "ab"),
                                         ("nullable_and_ignore", "a "), ("more_lookahead", "x")])
def test_earley_token_masks_are_exact(tok, name, prefix):
    """The mask equals the brute-force set: each token whose bytes keep the automaton alive."""
    c = compile_constraint(tok, grammar=EARLEY_GRAMMARS[name][0], use_cache=False)
    state = _walk(c, prefix.encode())
    assert state is not None
    got = set(c.allowed_token_ids(state).tolist())
    want = {t for t, data in enumerate(c.table.token_bytes[:tok.vocab_size])
            if data and c.step_bytes(state, data) is not None}
    assert got == want and got


def test_lalr_grammars_keep_the_fast_path(tok):
    for name in ("json", "arithmetic", "sql_select"):
        assert compile_constraint(tok, grammar=name, use_cache=False).path == "lalr"
    # lark would resolve this shift/reduce conflict as shift and lose "ac"; we do not
    c = compile_constraint(tok, grammar=EARLEY_GRAMMARS["shift_reduce_loses_sentences"][0], use_cache=False)
    assert c.matches("ac") and c.matches("accc") and not c.matches("acc")


def test_random_walks_parse_with_lark_earley(tok):
    grammar = ('start: stmt+\nstmt: NAME "=" expr ";"\nexpr: expr OP expr | NAME | NUMBER | "(" expr ")"\n'
               'OP: "+" | "-" | "*"\nNAME: /[a-z]+/\nNUMBER: /[0-9]+/\n%ignore " "\n')
    c = compile_constraint(tok, grammar=grammar, use_cache=False)
    assert c.path == "earley"
    oracle = lark_oracle(grammar)
    rng = random.Random(5)
    for _ in range(6):
        data, state = random_walk(c, tok, rng, max_tokens=20, stop_prob=0.15)
        w = _completion(c, c.step_bytes(c.initial_state, data), b"abc0123=;+() ", depth=6)
        assert w is not None
        assert oracle_accepts(oracle, (data + w).decode()), data + w


def test_ambiguity_cap_is_a_clear_error(tok):
    from sgrun.constrain.earley import EarleyRecognizer
    rules = [("start", [("N", "e")]), ("e", [("N", "e"), ("N", "e")]), ("e", [("T", 0)])]
    p = EarleyRecognizer(rules, 1, "start", max_items=50)
    sid = p.initial
    with pytest.raises(ConstraintTooComplexError, match="too ambiguous.*more than 50 items"):
        for _ in range(200):
            sid = p.scan(sid, (0,))


@pytest.mark.parametrize("bad,msg", [
    ("start: foo", "foo"),                       # undefined rule: lark's message names it
    # a longest-match lexer can never end A before A: it would strand a request (alive, never done)
    ('start: A A | A A A "b"\nA: /a+/\n', r"terminals A and A can be adjacent \(A is used in rule 'start'\).*'a'"),
    ('start: x | y\nx: A B\ny: A B\nA: /a+/\nB: /a+b?/\n', r"never end A before B"),
    ('start: "a" | \nb: "b" b', None),            # unproductive rule b is dropped; start still works
])
def test_earley_path_errors_name_the_rule(tok, bad, msg):
    if msg is None:
        assert compile_constraint(tok, grammar=bad, use_cache=False).matches("a")
        return
    with pytest.raises(GrammarError, match=msg):
        compile_constraint(tok, grammar=bad, use_cache=False)
