"""Structural tags (constrain/structural_tag.py): SGLang's {structures, triggers} shape and
xgrammar's newer {format} shape compile into one automaton whose masks stay exact across a
trigger (a token that straddles it included); bad shapes are errors naming the field; on the
real model through the engine and through the server's response_format (400 on bad shapes)."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import openai
import pytest

from constrain_fixtures import load_default_tokenizer
from server_fixtures import client_fixture, model_fixture, server_fixture

import sgrun
from sgrun.constrain import compile_constraint
from sgrun.constrain.bitmask import unpack_bitmask
from sgrun.errors import ConstraintError

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
LEGACY = {"structures": [{"begin": "<function=get_weather>", "schema": WEATHER, "end": "</function>"},
                         {"begin": "<function=answer>", "schema": ANSWER, "end": "</function>"}],
          "triggers": ["<function="]}
THINK_THEN_CALL = {"format": {"type": "sequence", "elements": [
    {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"},
    {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [
        {"begin": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",
         "content": {"type": "json_schema", "json_schema": WEATHER}, "end": "}\n</tool_call>"}],
     "at_least_one": False, "stop_after_first": False}]}}
THINK_THEN_JSON = {"format": {"type": "sequence", "elements": [
    {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"},
    {"type": "const_string", "value": "\n"},
    {"type": "json_schema", "json_schema": ANSWER}]}}


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


@pytest.mark.parametrize("text, ok", [
    ("free text only", True),
    ('I will call <function=get_weather>{"city":"Rome","unit":"c"}</function> then more text', True),
    ('a<function=answer>{"answer":"x"}</function>b<function=get_weather>{"city":"A","unit":"f"}</function>', True),
    ('<function=get_weather>{"city":"Rome"}</function>', False),          # schema violated
    ('<function=other>{}</function>', False),                              # no structure begins so
    ('<function=get_weather>{"city":"Rome","unit":"c"}', False),           # never closed
])
def test_legacy_shape_language(tok, text, ok):
    c = compile_constraint(tok, structural_tag=LEGACY)
    assert c.matches_bytes(text.encode()) is ok


@pytest.mark.parametrize("text, ok", [
    ('<think>rain?</think>Let me check. <tool_call>\n{"name": "get_weather", "arguments": '
     '{"city":"Oslo","unit":"c"}}\n</tool_call>', True),
    ("<think>nothing to call</think>Just text.", True),
    ("<think>a</think></think>", True),            # the think tag closes at its first end
    ("<think>unclosed", False),
    ('<think></think><tool_call>\n{"name": "other"', False),
    ("no think first", False),
])
def test_format_shape_think_then_calls(tok, text, ok):
    c = compile_constraint(tok, structural_tag=THINK_THEN_CALL)
    assert c.matches_bytes(text.encode()) is ok


def test_format_shapes_or_separator_regex_and_flags(tok):
    fmt = {"format": {"type": "or", "elements": [
        {"type": "json_schema", "json_schema": ANSWER},
        {"type": "tags_with_separator", "separator": ",", "at_least_one": True,
         "tags": [{"begin": "<n>", "content": {"type": "regex", "pattern": "[0-9]+"}, "end": "</n>"}]}]}}
    c = compile_constraint(tok, structural_tag=fmt)
    for text, ok in (('{"answer":"y"}', True), ("<n>1</n>,<n>22</n>", True), ("", False), ("<n>x</n>", False)):
        assert c.matches_bytes(text.encode()) is ok, text
    once = {"format": {"type": "triggered_tags", "triggers": ["<f>"], "at_least_one": True, "stop_after_first": True,
                       "tags": [{"begin": "<f>", "content": {"type": "const_string", "value": "go"}, "end": "</f>"}]}}
    c = compile_constraint(tok, structural_tag=once)
    assert c.matches_bytes(b"<f>go</f>")
    assert not any(c.matches_bytes(t) for t in (b"<f>go</f>tail", b"text<f>go</f>", b"<f>go</f><f>go</f>"))
    many = {"format": {**once["format"], "stop_after_first": False}}
    c = compile_constraint(tok, structural_tag=many)
    assert c.matches_bytes(b"<f>go</f>x<f>go</f>y") and not c.matches_bytes(b"x<f>go</f>")
    # The JSON text form (SGLang's /generate sends the structural tag as a string) compiles alike.
    assert compile_constraint(tok, structural_tag=json.dumps(LEGACY)).matches_bytes(b"x")


def test_masks_are_exact_across_the_trigger(tok):
    """Every token's mask bit equals "its bytes keep the automaton alive", in free text, inside
    a partly read trigger and right after it: a token that straddles the trigger and the JSON
    value is allowed exactly when both halves fit."""
    c = compile_constraint(tok, structural_tag=LEGACY)
    table = c.table
    rng = np.random.default_rng(1)
    for prefix in (b"Sure. ", b"Sure. <func", b"Sure. <function=get_weather>", b'<function=answer>{"answer":"a'):
        state = c.step_bytes(c.initial_state, prefix)
        allowed = unpack_bitmask(c.allowed_tokens(state), table.vocab_size)
        ids = [t for t in rng.choice(table.vocab_size, 1500, replace=False).tolist() if table.token_bytes[t]]
        ids += [t for t, b in enumerate(table.token_bytes) if b and (b.startswith(b"<") or b.startswith(b"{\""))][:400]
        for t in ids:
            assert allowed[t] == (c.step_bytes(state, table.token_bytes[t]) is not None), (prefix, table.token_bytes[t])
    state = c.step_bytes(c.initial_state, b"<function=get_weather")
    allowed = unpack_bitmask(c.allowed_tokens(state), table.vocab_size)
    closing = [t for t, b in enumerate(table.token_bytes) if b.startswith(b">")]
    verdicts = {t: c.step_bytes(state, table.token_bytes[t]) is not None for t in closing}
    assert all(allowed[t] == v for t, v in verdicts.items())
    assert any(verdicts.values()) and not all(verdicts.values())   # ">" fits, ">>" or "> " does not


@pytest.mark.parametrize("bad, field", [
    ({"structures": [{"begin": "<f>", "schema": WEATHER, "end": "</f>"}], "triggers": ["<g>"]},
     "structural_tag.structures[0].begin"),
    ({"structures": [{"begin": "<f>", "end": "</f>"}], "triggers": ["<f>"]}, "structural_tag.structures[0].schema"),
    ({"structures": [], "triggers": ["<f>"]}, "structural_tag.structures"),
    ({"format": {"type": "grammar", "grammar": "root ::= x"}}, "structural_tag.format.type"),
    ({"format": {"type": "tag", "begin": "<a>", "content": {"type": "any_text"}}}, "structural_tag.format.end"),
    ({"format": {"type": "sequence", "elements": [{"type": "const_string"}]}}, "structural_tag.format.elements[0].value"),
    ({"format": {"type": "triggered_tags", "triggers": ["<a"], "tags": []}}, "structural_tag.format.tags"),
    ({"format": {"type": "json_schema", "json_schema": WEATHER}, "triggers": ["x"]}, "either 'format'"),
    ({"shape": 1}, "unknown field 'shape'"),
])
def test_bad_shapes_name_the_field(tok, bad, field):
    with pytest.raises(ConstraintError, match=None) as err:
        compile_constraint(tok, structural_tag=bad)
    assert field in str(err.value)


def test_engine_think_then_json_on_the_real_model(engine, chat_prompt):
    prompt = chat_prompt("Think briefly inside <think></think>, then answer as JSON: what is the capital of France?")
    out = engine.generate(prompt, sgrun.SamplingParams(max_new_tokens=120, temperature=0,
                                                       structural_tag=THINK_THEN_JSON))[0]
    c = compile_constraint(engine.tokenizer, structural_tag=THINK_THEN_JSON)
    assert out.finish_reason == "stop" and c.matches_bytes(out.text.encode()), out.text
    jsonschema.validate(json.loads(out.text.split("</think>\n", 1)[1]), ANSWER)


server = server_fixture("shared_engine")
client = client_fixture(timeout=300)
model = model_fixture()


def test_server_response_format_structural_tag(client, model):
    rf = {"type": "structural_tag", **THINK_THEN_CALL}
    r = client.chat.completions.create(
        model=model, temperature=0, max_tokens=120, response_format=rf,
        messages=[{"role": "user", "content": "Think inside <think></think>, then call get_weather for Oslo "
                                              "in <tool_call> tags."}])
    text = r.choices[0].message.content
    c = compile_constraint(load_default_tokenizer(), structural_tag=THINK_THEN_CALL)
    if r.choices[0].finish_reason == "stop":
        assert c.matches_bytes(text.encode()), text
    else:
        assert c.step_bytes(c.initial_state, text.encode()) is not None, text
    legacy = client.chat.completions.create(model=model, temperature=0, max_tokens=60,
                                            response_format={"type": "structural_tag", **LEGACY},
                                            messages=[{"role": "user", "content": "Say hi."}])
    assert legacy.choices[0].message.content is not None


@pytest.mark.parametrize("rf, field", [
    ({"type": "structural_tag", "structures": [{"begin": "<f>", "schema": WEATHER, "end": "</f>"}],
      "triggers": ["<g>"]}, "structural_tag.structures[0].begin"),
    ({"type": "structural_tag", "format": {"type": "nope"}}, "structural_tag.format.type"),
    ({"type": "structural_tag"}, "structural_tag.structures"),
    ({"type": "structural_tag", "format": {"type": "tag", "begin": 1, "content": {"type": "any_text"}, "end": "x"}},
     "structural_tag.format.begin"),
])
def test_server_bad_structural_tag_is_a_400_naming_the_field(client, model, rf, field):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=model, max_tokens=8, response_format=rf,
                                       messages=[{"role": "user", "content": "hi"}])
    assert err.value.status_code == 400
    assert err.value.body["param"] == "response_format" and field in err.value.body["message"]
