"""Generation on the default model under each call format's constraint (the format forced by the
constraint, whatever the model would write on its own), and triggered constraints from
SamplingParams and from the DSL, on both DSL backends."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

import sgrun
from sgrun.constrain.tool_calls import FORMATS, ToolCallConstraint, ToolSpec
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.server.app import build_app
from server_thread import ServerThread

WEATHER = ToolSpec("get_weather", {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1, "maximum": 5}},
    "required": ["city", "days"], "additionalProperties": False}, "Weather forecast for a city")


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_format_generates_a_valid_call(engine, chat_prompt, name):
    fmt = FORMATS[name]
    prompt = chat_prompt("What's the weather in Paris for 3 days?", system=fmt.tools_block([WEATHER]))
    spec = ToolCallConstraint(name, (WEATHER,), "required", parallel=False).to_dict()
    out = engine.generate(prompt, SamplingParams(max_new_tokens=60, temperature=0, tool_calls=spec))[0]
    assert out.outputs[0].finish_reason == "stop", out.text
    content, calls = fmt.parse_calls(out.text, [WEATHER])
    assert content is None and len(calls) == 1 and calls[0].name == "get_weather", out.text
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER.parameters)


def test_triggered_constraint_in_sampling_params(engine, chat_prompt):
    # The first space triggers the constraint: a token that straddles it (" answer") is masked
    # unless what follows the space fits, so the output is a word, a space, then a choice.
    prompt = chat_prompt("Is the sky blue?")
    free = engine.generate(prompt, SamplingParams(max_new_tokens=4, temperature=0))[0].text
    assert free.startswith("The answer"), free   # what the masks below must change
    # The model's own continuation among the choices: it takes it, and the choice ends the output.
    params = SamplingParams(max_new_tokens=24, temperature=0,
                            triggers=[{"trigger": " ", "choices": ["answer", "yes", "no"]}])
    assert engine.generate(prompt, params)[0].text == "The answer"
    # Without it, " answer" is masked. Which allowed token greedy takes next is a near-tie of this
    # model (float32 pages: " no"; float16 pages: "Sky", and no space within 24 tokens), so the
    # claim is on what was generated: no straddling token, and a space only as word, space, choice.
    params = SamplingParams(max_new_tokens=24, temperature=0, triggers=[{"trigger": " ", "choices": ["yes", "no"]}])
    text = engine.generate(prompt, params)[0].text
    assert "answer" not in text and (" " not in text or re.fullmatch(r"[^ ]* (yes|no)", text)), text


@pytest.fixture(scope="module", params=["runtime", "endpoint"])
def backend(request, shared_engine):
    if request.param == "runtime":
        yield sgrun.Runtime(engine=shared_engine)
        return
    with ServerThread(build_app(shared_engine)) as server:
        yield sgrun.RuntimeEndpoint(server.url)


@sgrun.function
def rated(s, topic):
    s += sgrun.user(f"Rate {topic} from 1 to 5.")
    # Free text until the first space; from there the schema's integer.
    s += sgrun.assistant(sgrun.gen("answer", max_tokens=24, temperature=0, triggers=[
        {"trigger": " ", "json_schema": {"type": "integer", "minimum": 1, "maximum": 5}}]))


def test_triggered_constraint_in_the_dsl(backend):
    state = rated.run(topic="the sea", backend=backend)
    state.raise_error()
    assert re.fullmatch(r"[^ ]* [1-5]", state["answer"]), state["answer"]
