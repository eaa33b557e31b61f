"""Constrained generation with the real SmolLM2 through the engine: random schemas and regexes
sampled at temperature 1.0 (every finished output validates / fullmatches), the shipped grammars
and a GBNF grammar (finished outputs parse with lark; cut ones are still viable prefixes), and
jump-forward (same validity, fewer model forward calls)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lark import Lark

import sgrun

GRAMMARS = Path(__file__).resolve().parents[1] / "sgrun" / "grammars"
BATCH = 4  # requests per hypothesis example, decoded together in one engine batch


def _check_prefix(engine, params: sgrun.SamplingParams, text: str) -> None:
    """An output cut by max_new_tokens must still be a prefix the constraint can continue."""
    m = engine.compile_constraint(params).matcher()
    assert m.advance_text(text), f"cut output left the constraint: {text!r}"


def _generate(engine, prompt: str, params: sgrun.SamplingParams, n: int = BATCH) -> list:
    outs = engine.generate([prompt] * n, [params.replace(seed=params.seed + i) for i in range(n)])
    for o in outs:
        assert o.error is None, o.error
        assert o.finish_reason in ("stop", "length"), o.finish_reason
    return outs


# --- random JSON schemas (bounded, so a sampled answer can finish in the token budget) -------
_leaf = st.one_of(
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(1, 10)),
    st.just({"type": "boolean"}), st.just({"type": "null"}),
    st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
              st.integers(-100, 100), st.integers(0, 1000)),
    st.sampled_from([{"enum": ["red", "green", "blue"]}, {"const": 7}, {"type": "string", "format": "date"},
                     {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{2,3}$"},
                     {"type": "number", "minimum": 0, "maximum": 10}]),
)
_schema = st.one_of(
    _leaf,
    st.builds(lambda props, req: {"type": "object", "properties": dict(props),
                                  "required": [k for i, (k, _) in enumerate(props) if req >> i & 1],
                                  "additionalProperties": False},
              st.lists(st.tuples(st.sampled_from(["id", "name", "ok", "when", "size"]), _leaf), min_size=1, max_size=3,
                       unique_by=lambda kv: kv[0]), st.integers(0, 7)),
    st.builds(lambda items, hi: {"type": "array", "items": items, "maxItems": hi}, _leaf, st.integers(1, 3)),
)


@settings(max_examples=10, deadline=None, derandomize=True,  # the same examples every run: no flaky CI
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(schema=_schema, seed=st.integers(0, 10_000))
def test_random_schemas_sampled_outputs_validate(engine, chat_prompt, schema, seed):
    prompt = chat_prompt(f"Reply with JSON matching this schema: {json.dumps(schema)}")
    params = sgrun.SamplingParams(max_new_tokens=56, temperature=1.0, json_schema=schema, seed=seed)
    outs = _generate(engine, prompt, params)
    checker = jsonschema.FormatChecker(["date"])
    for o in outs:
        if o.finish_reason == "stop":
            jsonschema.validate(json.loads(o.text), schema, format_checker=checker)
        else:
            _check_prefix(engine, params, o.text)
    assert sum(o.finish_reason == "stop" for o in outs) >= BATCH // 2, [o.text for o in outs]


# --- random regexes from a safe, finite subset: every output ends by itself -----------------
_atom = st.sampled_from(["[a-z]", "[0-9]", "[A-F0-9]", "(cat|dog)", "x", "-", "\\.", " ", "é", "[aeiou]{2}"])
_regex = st.lists(st.builds(lambda a, r: f"(?:{a}){r}", _atom, st.sampled_from(["", "?", "{1,3}", "{2}", "{0,4}"])),
                  min_size=1, max_size=5).map("".join)


@settings(max_examples=10, deadline=None, derandomize=True,  # the same examples every run: no flaky CI
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pattern=_regex, seed=st.integers(0, 10_000))
def test_random_regexes_sampled_outputs_fullmatch(engine, chat_prompt, pattern, seed):
    prompt = chat_prompt(f"Write a string matching the regular expression {pattern}")
    # the longest string of this subset is 60 bytes, so 64 tokens always suffice
    params = sgrun.SamplingParams(max_new_tokens=64, temperature=1.0, regex=pattern, seed=seed)
    outs = _generate(engine, prompt, params)
    for o in outs:
        assert o.finish_reason == "stop", (pattern, o.text)  # a finite language always ends in time
        assert re.fullmatch(pattern, o.text), (pattern, o.text)


# --- grammars ------------------------------------------------------------------------------
@pytest.mark.parametrize("name,question", [
    ("json", "Give a JSON object with two keys, the name and the age of a cat."),
    ("arithmetic", "Write a short arithmetic expression that equals 10, like (2+3)*2."),
    ("sql_select", "Write a SQL query selecting the names of users older than 30 from table users."),
])
def test_shipped_grammars_with_the_model(engine, chat_prompt, name, question):
    parser = Lark((GRAMMARS / f"{name}.lark").read_text(), parser="lalr")
    params = sgrun.SamplingParams(max_new_tokens=48, temperature=0.7, top_p=0.95, grammar=name, seed=11)
    outs = _generate(engine, chat_prompt(question), params)
    # at least one of the outputs must finish (a question asking for a small object: asked for a
    # list of colours, the model kept listing cats past any budget)
    greedy = engine.generate(chat_prompt(question), params.replace(temperature=0.0, max_new_tokens=96))[0]
    outs.append(greedy)
    finished = [o for o in outs if o.finish_reason == "stop"]
    assert finished, [o.text for o in outs]
    for o in finished:
        parser.parse(o.text)
        if name == "json":
            json.loads(o.text)
    for o in outs:
        if o.finish_reason == "length":
            _check_prefix(engine, params, o.text)


def test_gbnf_grammar_with_the_model(engine, chat_prompt):
    gbnf = '''
    root   ::= item (", " item){0,3}
    item   ::= color " " animal
    color  ::= "red" | "green" | "blue"
    animal ::= "cat" | "dog" | "fox"
    '''
    params = sgrun.SamplingParams(max_new_tokens=32, temperature=1.0, grammar=gbnf, seed=3)
    outs = _generate(engine, chat_prompt("List a few colored animals."), params)
    item = r"(red|green|blue) (cat|dog|fox)"
    for o in outs:
        assert o.finish_reason == "stop", o.text
        assert re.fullmatch(rf"{item}(, {item}){{0,3}}", o.text), o.text


# --- jump-forward ---------------------------------------------------------------------------
JF_SCHEMA = {"type": "object", "properties": {
    "customer_full_name": {"type": "string", "maxLength": 16},
    "shipping_priority_level": {"enum": ["standard_delivery", "express_delivery"]},
    "number_of_items_ordered": {"type": "integer", "minimum": 1, "maximum": 9},
    "gift_wrapping_requested": {"type": "boolean"}},
    "required": ["customer_full_name", "shipping_priority_level", "number_of_items_ordered",
                 "gift_wrapping_requested"], "additionalProperties": False}


def test_jump_forward_valid_and_fewer_forward_calls(engine, chat_prompt):
    prompts = [chat_prompt(f"Order {i}: {who} wants {i + 1} books.") for i, who in
               enumerate(["Ada Lovelace", "Alan Turing", "Grace Hopper"])]
    calls = {}
    for jf in (False, True):
        params = sgrun.SamplingParams(max_new_tokens=128, temperature=0.0, json_schema=JF_SCHEMA, jump_forward=jf)
        before = engine.stats()["forward_calls"]
        outs = [engine.generate(p, params)[0] for p in prompts]  # one at a time: calls == steps
        calls[jf] = engine.stats()["forward_calls"] - before
        for o in outs:
            assert o.finish_reason == "stop", o.text
            jsonschema.validate(json.loads(o.text), JF_SCHEMA)
    assert calls[True] < calls[False] * 0.8, calls
