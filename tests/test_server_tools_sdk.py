"""Tool calling through the official openai SDK against a real sgrun server (uvicorn on
loopback, the real SmolLM2 weights): parse() with pydantic tools (nested models, enums,
Optional), the .stream() helper's own accumulation, argument bounds held under sampling at high
temperature (jsonschema-validated), tools + response_format, truncation, a 3-turn tool loop with
role: tool messages, and usage/logprob invariants when jump-forward inserts forced tokens."""

from __future__ import annotations

import enum
import json
import re
from typing import Optional

import jsonschema
import openai
import pydantic
import pytest

from server_fixtures import client_fixture, model_fixture, server_fixture



class Unit(str, enum.Enum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Place(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=20)
    country: Optional[str] = pydantic.Field(default=None, max_length=20)


class GetForecast(pydantic.BaseModel):
    """Weather forecast for a place."""
    place: Place
    unit: Unit
    days: int = pydantic.Field(ge=1, le=5)


BOUNDED = {"type": "function", "function": {
    "name": "roll", "description": "Roll dice",
    "parameters": {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 1, "maximum": 5},
        "sides": {"enum": [6, 20]},
        "label": {"type": "string", "pattern": "^[a-z]{1,8}$"},
        "weight": {"type": "number", "exclusiveMinimum": 0, "maximum": 1.5}},
        "required": ["n", "sides", "label", "weight"], "additionalProperties": False}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
                   "required": ["city"], "additionalProperties": False}}}
ANSWER = {"type": "object", "properties": {"summary": {"type": "string", "maxLength": 40},
                                           "temperature": {"type": "integer", "minimum": -50, "maximum": 60}},
          "required": ["summary", "temperature"], "additionalProperties": False}


server = server_fixture()
client = client_fixture(timeout=300)  # the sampling and multi-turn tests generate a few hundred tokens
model = model_fixture()


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_parse_with_pydantic_tool(client, model):
    completion = client.chat.completions.parse(
        model=model, messages=ask("What's the forecast for Paris, France for 3 days in celsius?"),
        tools=[openai.pydantic_function_tool(GetForecast)], tool_choice="required", temperature=0,
        max_tokens=80, parallel_tool_calls=False)  # a 135M model repeats a call when it may
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    parsed = call.function.parsed_arguments          # the SDK validated it against the model
    assert isinstance(parsed, GetForecast) and isinstance(parsed.place, Place) and isinstance(parsed.unit, Unit)
    assert 1 <= parsed.days <= 5


def test_stream_helper_accumulates_tool_calls(client, model):
    with client.chat.completions.stream(
            model=model, messages=ask("Weather in Oslo?"), tools=[openai.pydantic_function_tool(GetForecast), WEATHER],
            tool_choice="required", temperature=0, max_tokens=80, parallel_tool_calls=False) as stream:
        done = [e for e in stream if e.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert len(calls) == 1 and calls[0].id.startswith("call_") and calls[0].type == "function"
    assert done and done[-1].name == calls[0].function.name and done[-1].arguments == calls[0].function.arguments
    schema = {"GetForecast": openai.pydantic_function_tool(GetForecast)["function"]["parameters"],
              "get_weather": WEATHER["function"]["parameters"]}[calls[0].function.name]
    jsonschema.validate(json.loads(calls[0].function.arguments), schema)


def _bounded_samples(client, model, count: int, per_request: int) -> None:
    schema = BOUNDED["function"]["parameters"]
    seen = 0
    for seed in range(count // per_request):
        r = client.chat.completions.create(
            model=model, messages=ask("Roll some dice for me."), tools=[BOUNDED], tool_choice="required",
            temperature=1.5, n=per_request, seed=seed, max_tokens=60, parallel_tool_calls=False)
        for choice in r.choices:
            assert choice.finish_reason == "tool_calls", choice
            for call in choice.message.tool_calls:
                jsonschema.validate(json.loads(call.function.arguments), schema)
                seen += 1
    assert seen == count


def test_tool_argument_bounds_hold_at_high_temperature(client, model):
    _bounded_samples(client, model, 20, 10)


@pytest.mark.slow
def test_tool_argument_bounds_hold_over_200_samples(client, model):
    _bounded_samples(client, model, 200, 40)


def test_tools_with_response_format(client, model):
    rf = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER, "strict": True}}
    r = client.chat.completions.create(model=model, messages=ask("How warm is it in Rome?"), tools=[WEATHER],
                                       response_format=rf, temperature=1.0, n=6, seed=3, max_tokens=80,
                                       parallel_tool_calls=False)
    for choice in r.choices:
        if choice.message.tool_calls:      # a call is held to the tool ...
            assert choice.finish_reason == "tool_calls"
            for call in choice.message.tool_calls:
                jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
        else:                              # ... a text answer to the response_format schema
            assert choice.finish_reason == "stop", choice
            jsonschema.validate(json.loads(choice.message.content), ANSWER)
    # tool_choice keeps its meaning next to response_format.
    forced = client.chat.completions.create(model=model, messages=ask("How warm is it in Rome?"), tools=[WEATHER],
                                            response_format=rf, tool_choice="required", temperature=0, max_tokens=40,
                                            parallel_tool_calls=False)
    assert forced.choices[0].finish_reason == "tool_calls"
    plain = client.chat.completions.create(model=model, messages=ask("How warm is it in Rome?"), tools=[WEATHER],
                                           response_format=rf, tool_choice="none", temperature=0, max_tokens=60)
    assert not plain.choices[0].message.tool_calls
    jsonschema.validate(json.loads(plain.choices[0].message.content), ANSWER)


def _needed_tokens(error: openai.BadRequestError) -> int:
    """The count a budget refusal names ("... needs N tokens ..."), so tests follow the constraint's own
    arithmetic instead of a number measured once."""
    assert error.body.get("param") == "max_tokens", error.body
    match = re.search(r"needs (\d+) tokens", error.body["message"])
    assert match, error.body["message"]
    return int(match.group(1))


def test_a_call_that_cannot_fit_max_tokens_is_cut_or_refused_and_fits_at_the_named_count(client, model):
    """A required call that cannot close within max_tokens runs and is cut (finish "length", with
    usage, as OpenAI's API) by default; with strict_budget it is refused up front (a 400 naming
    max_tokens and the tokens the shortest call needs), streamed or not. At that count the call is
    complete and the turn ends with tool_calls, never cut mid-argument."""
    tool = openai.pydantic_function_tool(GetForecast)
    ask_forecast = dict(model=model, messages=ask("Forecast for Paris?"), tools=[tool], tool_choice="required",
                        temperature=0)
    cut = client.chat.completions.create(**ask_forecast, max_tokens=8)
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 8
    assert "<tool_call>" not in (cut.choices[0].message.content or "")   # the opened markup is not content
    cut_early = client.chat.completions.create(**ask_forecast, max_tokens=2)
    assert cut_early.choices[0].finish_reason == "length" and not cut_early.choices[0].message.content
    strict = {"extra_body": {"strict_budget": True}}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**ask_forecast, max_tokens=8, **strict)
    needed = _needed_tokens(refused.value)
    assert needed > 8
    with pytest.raises(openai.BadRequestError) as refused_streamed:
        list(client.chat.completions.create(**ask_forecast, max_tokens=8, stream=True, **strict))
    assert _needed_tokens(refused_streamed.value) == needed
    r = client.chat.completions.create(**ask_forecast, max_tokens=needed)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and r.usage.completion_tokens <= needed
    call = choice.message.tool_calls[0]
    assert call.function.name == "GetForecast"
    GetForecast.model_validate_json(call.function.arguments)


def test_three_turn_tool_loop(client, model):
    messages = [{"role": "system", "content": "You are a weather assistant. Use the tools."},
                {"role": "user", "content": "Compare the weather in Paris and in Rome."}]
    cached = []
    for turn, (choice_mode, result) in enumerate([("required", "Paris: 18 C, cloudy"),
                                                  ("required", "Rome: 24 C, sunny"), ("none", None)]):
        r = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER], tool_choice=choice_mode,
                                           temperature=0, max_tokens=40, parallel_tool_calls=False)
        cached.append(r.usage.prompt_tokens_details.cached_tokens)
        msg = r.choices[0].message
        if result is None:
            assert msg.content and not msg.tool_calls and "<tool_call>" not in msg.content
            break
        assert r.choices[0].finish_reason == "tool_calls"
        call = msg.tool_calls[0]
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
        messages.append({"role": "assistant", "content": msg.content, "tool_calls": [call.model_dump()]})
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    # Each turn re-sends the conversation; the earlier turns come back out of the prefix cache.
    assert cached[1] > 0 and cached[2] > cached[1]
def test_usage_and_logprobs_under_jump_forward(client, model, shared_engine):
    tok = shared_engine.tokenizer
    # Long forced runs (the property names) make jump-forward insert many tokens at once.
    schema = {"type": "object", "properties": {"a_rather_long_property_name": {"type": "integer"},
                                               "another_quite_long_property_name": {"type": "boolean"}},
              "required": ["a_rather_long_property_name", "another_quite_long_property_name"]}
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    # Below the shortest object: cut at max_tokens with usage and logprobs (OpenAI's answer), or
    # refused up front under strict_budget.
    cut = client.chat.completions.create(model=model, messages=ask("Give me the object."), response_format=rf,
                                         temperature=0, max_tokens=6, logprobs=True, top_logprobs=2)
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage.completion_tokens == 6 == len(cut.choices[0].logprobs.content)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=model, messages=ask("Give me the object."), response_format=rf,
                                       temperature=0, max_tokens=6, extra_body={"strict_budget": True})
    needed = _needed_tokens(refused.value)
    for max_tokens in (needed, needed + 3, max(40, needed + 10)):   # tight budgets: jump-forward near the end
        r = client.chat.completions.create(model=model, messages=ask("Give me the object."), response_format=rf,
                                           temperature=0, max_tokens=max_tokens, logprobs=True, top_logprobs=2)
        choice = r.choices[0]
        items = choice.logprobs.content
        assert r.usage.completion_tokens <= max_tokens
        assert len(items) == r.usage.completion_tokens
        assert "".join(t.token for t in items) == choice.message.content
        assert b"".join(bytes(t.bytes) for t in items).decode() == choice.message.content
        for t in items:  # forced tokens too: the model's own log-probability, with alternatives
            assert t.logprob <= 0.0 and len(t.top_logprobs) == 2
            assert t.top_logprobs[0].logprob >= t.logprob - 1e-4
        assert any(t.logprob < -1e-3 for t in items) or len(items) < 3
        if choice.finish_reason == "stop":
            jsonschema.validate(json.loads(choice.message.content), schema)
        assert tok.encode(choice.message.content, add_bos=False)  # the text re-tokenises
    # Tool calls: the same invariants, streamed.
    chunks = list(client.chat.completions.create(
        model=model, messages=ask("Weather in Paris?"), tools=[WEATHER], tool_choice="required", temperature=0,
        max_tokens=30, logprobs=True, stream=True, stream_options={"include_usage": True}))
    lps = [t for c in chunks for ch in c.choices if ch.logprobs for t in ch.logprobs.content]
    usage = chunks[-1].usage
    assert usage.completion_tokens <= 30 and len(lps) == usage.completion_tokens
