"""Every constraint kind a user can send, through a real server on the default configuration (the
default model's int4 weights, dtype auto), as a fresh install would run it: regex, JSON Schema,
choices, a Lark grammar (lark's strict mode needs `interegular`), a shipped grammar by name, a GBNF
grammar and a tool call. Each output is checked by a checker that shares no code with sgrun's
constraint compiler: Python's `re`, `jsonschema`, lark's own Earley parser, `json`, and a regex
written by hand for the GBNF grammar's language."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import lark
import pytest

from constrain_fixtures import load_default_tokenizer
from server_fixtures import client_fixture, engine_fixture, model_fixture, server_fixture

engine = engine_fixture(memory_gb=0.5)  # every option at its default: int4 weights, dtype auto
server = server_fixture("engine")
client = client_fixture("server")
model = model_fixture("server")

ASK = [{"role": "user", "content": "Tell me about a city in France."}]

CITY_REGEX = r"(Paris|Lyon|Nice|Lille), population [1-9][0-9]{2,6}"
PERSON_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
                 "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 24},
                                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}}}
SUM_LARK = r"""
start: expr
expr: NUMBER (OP NUMBER)*
OP: "+" | "-" | "*"
NUMBER: /[1-9][0-9]{0,3}/
"""
LIST_GBNF = r"""
root ::= "[" item ("," " "? item)* "]"
item ::= "\"" [a-z]+ "\""
"""
LIST_GBNF_LANGUAGE = r'\["[a-z]+"(, ?"[a-z]+")*\]'
ADD_TOOL = {"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"], "additionalProperties": False}}}


def _chat(client, model, max_tokens=48, messages=ASK, **extra):
    body = {k: extra.pop(k) for k in ("response_format", "tools", "tool_choice") if k in extra}
    response = client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens,
                                              temperature=0, extra_body=extra or None, **body)
    return response.choices[0]


def test_regex(client, model):
    choice = _chat(client, model, regex=CITY_REGEX)
    assert re.fullmatch(CITY_REGEX, choice.message.content), choice.message.content
    assert choice.finish_reason == "stop"


def test_json_schema(client, model):
    choice = _chat(client, model, max_tokens=96, response_format={
        "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True}},
        messages=[{"role": "user", "content": "Invent a person with a name, an age and tags."}])
    jsonschema.validate(json.loads(choice.message.content), PERSON_SCHEMA)
    assert choice.finish_reason == "stop"


def test_choices(server):
    """Choices are a native-API constraint (SGLang's /generate); the text is one of them exactly."""
    options = ["Paris", "Lyon", "Marseille"]
    reply = httpx.post(server.url + "/generate", timeout=120, json={
        "text": "The capital of France is", "sampling_params": {"choices": options, "temperature": 0}})
    assert reply.status_code == 200, reply.text
    assert reply.json()["text"] in options


def test_lark_grammar(client, model):
    choice = _chat(client, model, ebnf=SUM_LARK, messages=[{"role": "user", "content": "Write a sum of two numbers."}])
    lark.Lark(SUM_LARK, parser="earley").parse(choice.message.content)  # raises on text outside the grammar
    assert choice.finish_reason == "stop"


def test_shipped_grammar_by_name(client, model):
    """A grammar the package ships, asked for by name: its file must be in the installed package."""
    from importlib.resources import files
    text = files("sgrun.grammars").joinpath("arithmetic.lark").read_text()
    choice = _chat(client, model, ebnf="arithmetic", messages=[{"role": "user", "content": "Write (1+2)*3."}])
    # SmolLM2 under this grammar often writes digits until max_tokens ("What is 6 times 7?" gives
    # "107.111..." at float32 on AVX2, stops at bf16): a cut answer must still be a prefix of the
    # shipped file's language, a finished one a sentence of it
    if choice.finish_reason == "length":
        from sgrun.constrain import compile_constraint
        assert compile_constraint(load_default_tokenizer(), grammar=text).matcher().advance_text(choice.message.content)
    else:
        assert choice.finish_reason == "stop"
        lark.Lark(text, parser="earley").parse(choice.message.content)


def test_gbnf_grammar(client, model):
    choice = _chat(client, model, ebnf=LIST_GBNF, messages=[{"role": "user", "content": "List some fruits."}])
    assert re.fullmatch(LIST_GBNF_LANGUAGE, choice.message.content), choice.message.content
    assert choice.finish_reason == "stop"


def test_tool_call(client, model):
    choice = _chat(client, model, max_tokens=64, tools=[ADD_TOOL], tool_choice="required",
                   messages=[{"role": "user", "content": "What is 17 + 25?"}])
    calls = choice.message.tool_calls
    assert calls and choice.finish_reason == "tool_calls", choice
    for call in calls:
        assert call.function.name == "add"
        jsonschema.validate(json.loads(call.function.arguments), ADD_TOOL["function"]["parameters"])


@pytest.mark.parametrize("field,value", [("regex", "(unclosed"), ("ebnf", "start: missing_rule"),
                                         ("ebnf", 'root ::= "a" undefined')])
def test_a_broken_constraint_is_a_400_naming_its_field(client, model, field, value):
    import openai
    with pytest.raises(openai.BadRequestError) as info:
        _chat(client, model, **{field: value})
    assert info.value.body.get("param") == field, info.value.body
