"""GBNF: every grammar of llama.cpp's grammars/ directory (vendored in tests/data/gbnf, MIT)
compiles; GBNF runs with llama.cpp's character-level semantics (every split of the text into
terminals); the syntax's features work and what we do not support is refused naming the line;
and the real SmolLM2 generates under a few of them, checked by oracles that share no code
with the compiler (Python's re, json, lark's Earley parser)."""

from __future__ import annotations

import itertools
import json
import random
import re
import time
from pathlib import Path

import pytest
from lark import Lark
from lark.exceptions import LarkError

import sgrun
from constrain_fixtures import load_default_tokenizer, random_walk, shortest_completion
from sgrun.constrain import GrammarError, compile_constraint

CORPUS = Path(__file__).resolve().parent / "data" / "gbnf"
LLAMA_CPP_GRAMMARS = ["arithmetic", "c", "chess", "english", "japanese", "json", "json_arr", "list"]


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


@pytest.mark.parametrize("name", LLAMA_CPP_GRAMMARS)
def test_llama_cpp_grammars_compile(tok, name):
    t = time.perf_counter()
    c = compile_constraint(tok, grammar=(CORPUS / f"{name}.gbnf").read_text(), use_cache=False)
    assert time.perf_counter() - t < 5  # the compile budget
    assert c.path == "earley" and len(c.allowed_token_ids(c.initial_state)) > 0


@pytest.mark.parametrize("name,good,bad", [
    ("arithmetic", ["x=1\n", "a1 +2 = (b+2)\n"], ["x=1", "=1\n", "x=(1\n"]),
    ("chess", ["1. e4 e5\n2. Nf3 Nc6\n"], ["1. e4 e5\n", "1. e9 e5\n2. a3 a4\n"]),
    ("list", ["- milk\n- eggs\n"], ["- milk", "milk\n"]),
    ("c", ["int main(){return 0;}"], ["int main(){return 0}"]),
    ("japanese", ["こんにちは 世界"], ["hello"]),
    ("json", ['{"a": [1, {"b": null}], "c": "\\u00e9"}'], ['{"a" 1}', "[1]"]),
])
def test_llama_cpp_grammar_languages(tok, name, good, bad):
    c = compile_constraint(tok, grammar=(CORPUS / f"{name}.gbnf").read_text())
    for g in good:
        assert c.matches(g), g
    for b in bad:
        assert not c.matches(b), b


def test_character_level_semantics(tok):
    """A longest-match lexer would read "ab" as one [a-z]+ and never find the "b"; GBNF (llama.cpp)
    is character-level, so every split counts. Checked by brute force against lark's Earley
    parser with every split (lexer="dynamic_complete") on the same grammar in Lark syntax."""
    gbnf = 'root ::= x "b" | "(" root ")" x?\nx ::= [a-z]+ | "(" x ")"\n'
    lark = 'start: x "b" | "(" start ")" x?\nx: /[a-z]+/ | "(" x ")"\n'
    c = compile_constraint(tok, grammar=gbnf, use_cache=False)
    oracle = Lark(lark, parser="earley", lexer="dynamic_complete")
    for n in range(7):
        for chars in itertools.product("ab()", repeat=n):
            text = "".join(chars)
            try:
                oracle.parse(text)
                want = True
            except LarkError:
                want = False
            assert c.matches_bytes(text.encode()) == want, text


def test_gbnf_syntax_features(tok):
    gbnf = r'''
    # comments, multi-line rules, escapes, classes, negation, any char, bounded repeats
    root ::= greeting
             sep
             body{1,3}   # one to three bodies
             end
    greeting ::= "h\x69" | "\u00e9t\u00e9" | "\U0001F600"
    sep  ::= [ \t]
    body ::= [^\n\x00-\x1F#] | "#" [0-9a-fA-F]{2}
    end  ::= "." .?
    '''
    c = compile_constraint(tok, grammar=gbnf, use_cache=False)
    for good in ["hi x.", "été\tab#0f.", "\U0001F600 abc.!", "hi é.\n"]:
        assert c.matches_bytes(good.encode()), good
    for bad in ["hi .", "hi abcd.", "hi #0g.", "hi\nx.", "hi x", "hi x.ab"]:
        assert not c.matches_bytes(bad.encode()), bad


@pytest.mark.parametrize("bad,msg", [
    ('root ::= <[1000]> "a"', r"line 1: token matches .* not supported"),
    ('root ::= "a"\nthink ::= !<think>', r"line 2: token matches"),
    ('root ::= "a"{2', r"line 1: a repetition must be"),
    ('root ::= "a"{3,1}', r"maximum is below the minimum"),
    ('root ::= "\\x4"', r"\\x needs 2 hex digits"),
    ('root ::= [a-', r"unterminated"),
    ('root ::= "a"\nx ::= ( "b"', r"line 2: missing '\)'"),
    ('root ::= item', r"undefined rule 'item'"),
    ('item ::= "a"', r"no 'root' rule"),
])
def test_gbnf_refusals_name_the_line(tok, bad, msg):
    with pytest.raises(GrammarError, match=msg):
        compile_constraint(tok, grammar=bad, use_cache=False)


# --- the real model --------------------------------------------------------------------------
def _viable_prefix_check(engine, params, text: str, oracle) -> None:
    """A cut output must be a viable prefix: it plus our shortest completion passes the oracle."""
    c = engine.compile_constraint(params)
    m = c.matcher()
    assert m.advance_text(text), text
    w = shortest_completion(c, m.state)
    assert w is not None, text
    assert oracle(text + w.decode()), text + w.decode()


_CHESS = re.compile(r"1\. M M\n([1-9][0-9]?\. M M\n)+".replace(
    "M", r"(?:(?:(?:[a-h]x)?[a-h][1-8](?:=[NBKQR])?)|(?:[NBKQR][a-h]?[1-8]?x?[a-h][1-8])|(?:O-O(?:-O)?))[+#]?"))
_LIST = re.compile(r"(- [^\r\n\x0b\x0c\x85\u2028\u2029]+\n)+")


def _json_ok(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


_ENGLISH_CHAR = r"[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]"
_ENGLISH = re.compile(rf"{_ENGLISH_CHAR}+([ \t\n]{_ENGLISH_CHAR}+)*")
_ORACLES = {"json": _json_ok, "json_arr": _json_ok, "chess": lambda t: bool(_CHESS.fullmatch(t)),
            "list": lambda t: bool(_LIST.fullmatch(t)), "english": lambda t: bool(_ENGLISH.fullmatch(t))}


@pytest.mark.parametrize("name", sorted(_ORACLES))
def test_random_walks_under_llama_cpp_grammars_pass_an_independent_oracle(tok, name):
    """A random 'model' (any allowed token, then the shortest completion) must always produce
    text that Python's json / re accept: no false accepts on the whole path, token masks included."""
    c = compile_constraint(tok, grammar=(CORPUS / f"{name}.gbnf").read_text())
    rng = random.Random(11)
    for _ in range(4):
        data, _ = random_walk(c, tok, rng, max_tokens=24, stop_prob=0.2)
        text = data.decode("utf-8")
        assert _ORACLES[name](text), (name, text)


@pytest.mark.parametrize("name,question,oracle", [
    ("chess", "Write the first moves of a chess game in PGN.", lambda t: bool(_CHESS.fullmatch(t))),
    ("list", "List three things to buy at the market.", lambda t: bool(_LIST.fullmatch(t))),
    ("json_arr", "Give a JSON array of two small numbers.", _json_ok),
])
def test_generation_under_llama_cpp_grammars(engine, chat_prompt, name, question, oracle):
    gbnf = (CORPUS / f"{name}.gbnf").read_text()
    params = sgrun.SamplingParams(max_new_tokens=24, temperature=0.8, grammar=gbnf, seed=5)
    outs = engine.generate([chat_prompt(question)] * 2, [params, params.replace(seed=6)])
    for o in outs:
        assert o.error is None and o.text, o.error
        if o.finish_reason == "stop":
            assert oracle(o.text), o.text
        else:
            _viable_prefix_check(engine, params, o.text, oracle)
