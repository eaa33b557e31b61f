"""The tool-call package (sgrun.constrain.tool_calls): for every call format, detection from its
family's chat-template text, render -> constraint -> parse round trips, parsing that family's
own sample outputs, streaming deltas in OpenAI's shape, truncation, and exact schemas
(bounds, enums, $ref/$defs against the tool's own parameters, refusals naming tool/keyword/pointer).
Also the general triggered constraints and the reasoning prefix."""

from __future__ import annotations

import enum
import json
from typing import Optional

import jsonschema
import openai
import pydantic
import pytest

from sgrun.constrain import compile_constraint
from sgrun.constrain.tool_calls import (FORMATS, StreamingCallParser, ToolCallConstraint, ToolSchemaError, ToolSpec,
                                        detect_format, get_format)

WEATHER = ToolSpec("get_weather", {"type": "object", "properties": {
    "city": {"type": "string", "minLength": 1},
    "days": {"type": "integer", "minimum": 1, "maximum": 5},
    "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}, "Weather forecast")
ADD = ToolSpec("add", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
                       "required": ["a", "b"], "additionalProperties": False})
TOOLS = (WEATHER, ADD)
CALLS = [("get_weather", {"city": "Paris", "days": 3, "unit": "celsius"}), ("add", {"a": 1, "b": 2.5})]

# A representative snippet of each family's chat template (the part that talks about tools).
TEMPLATES = {
    "hermes": ("{%- if tools %}{{- '<|im_start|>system\\n' }}# Tools\\n<tools>{% for tool in tools %}"
               "{{ tool | tojson }}{% endfor %}</tools>\\nFor each function call, return a json object within "
               "<tool_call></tool_call> XML tags{%- endif %}"),
    "llama3_json": ("{%- if builtin_tools is defined or tools is not none %}{{- 'Environment: ipython\\n' }}{%- endif %}"
                    "{{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name "
                    "and its value}.' }}{%- if message.tool_calls %}{{- '<|python_tag|>' }}{%- endif %}"),
    "mistral": ("{%- if tools %}[AVAILABLE_TOOLS] {{ tools | tojson }}[/AVAILABLE_TOOLS]{%- endif %}"
                "{%- if message.tool_calls %}[TOOL_CALLS] [{% for tc in message.tool_calls %}...{% endfor %}]"
                "{%- endif %}"),
    "pythonic": ("{{- 'If you decide to invoke any of the function(s), you MUST put it in the format of "
                 "[func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]' }}"),
    "qwen3_coder": ("{%- if tools %}<tools>{% for tool in tools %}<function>\\n<name>{{ tool.name }}</name>{% endfor %}"
                    "</tools>If you choose to call a function ONLY reply in the following format:\\n<tool_call>\\n"
                    "<function=example_function_name>\\n<parameter=example_parameter_1>\\nvalue_1\\n</parameter>\\n"
                    "</function>\\n</tool_call>{%- endif %}"),
    "phi4_mini": ("{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message %}"
                  "{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' }}"
                  "{% endif %}{% endfor %}"),
    "gemma": "{{ '<start_of_turn>' + role + '\\n' }}{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}",
}

# What models of each family actually write (spacing and newlines as they do, not as sgrun does).
SAMPLES = {
    "hermes": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>\n'
               '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2.5}}\n</tool_call>'),
    "llama3_json": '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}; '
                   '{"name": "add", "parameters": {"a": 1, "b": 2.5}}',
    "mistral": '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
               '{"name": "add", "arguments": {"a": 1, "b": 2.5}}]',
    "pythonic": '[get_weather(city="Paris", days=3), add(a=1, b=2.5)]',
    "qwen3_coder": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
                    "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=add>\n<parameter=a>\n1\n"
                    "</parameter>\n<parameter=b>\n2.5\n</parameter>\n</function>\n</tool_call>"),
    "phi4_mini": ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
                  '{"name": "add", "arguments": {"a": 1, "b": 2.5}}]<|/tool_call|>'),
    "gemma": '```tool_code\nget_weather(city="Paris", days=3)\nadd(a=1, b=2.5)\n```',
}
SAMPLE_ARGS = [("get_weather", {"city": "Paris", "days": 3}), ("add", {"a": 1, "b": 2.5})]


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_detected_from_its_template(name):
    assert detect_format(TEMPLATES[name]).name == name
    assert get_format(name.upper()).name == name


def test_template_without_tools_gets_the_default_format():
    assert detect_format("{% for m in messages %}{{ m.content }}{% endfor %}").name == "hermes"
    assert detect_format(None).name == "hermes"
    with pytest.raises(ValueError, match="unknown tool-call parser 'nope'"):
        get_format("nope")


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_family_sample_output_parses(name):
    content, calls = FORMATS[name].parse_calls(SAMPLES[name], list(TOOLS))
    assert content is None
    assert [(c.name, json.loads(c.arguments)) for c in calls] == SAMPLE_ARGS
    assert all(c.complete for c in calls) and len({c.id for c in calls}) == 2


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_render_constraint_parse_round_trip(tokenizer, name):
    fmt = FORMATS[name]
    text = fmt.render(CALLS)
    for mode in ("auto", "required"):
        c = compile_constraint(tokenizer, tool_calls=ToolCallConstraint(name, TOOLS, mode))
        assert c.matches_bytes(text.encode()), (mode, text)
        # A bound, an enum and a missing required argument are each outside the language.
        for bad in ({"city": "Paris", "days": 9}, {"city": "Paris", "unit": "kelvin"}, {"days": 2}):
            assert not c.matches_bytes(fmt.render([("get_weather", bad)]).encode()), bad
        assert not c.matches_bytes(fmt.render([("delete_all", {})]).encode())
        assert c.matches(text, tokenizer)  # the tokenizer's own encoding walks through too
    content, calls = fmt.parse_calls(text, list(TOOLS))
    assert content is None and [(c.name, json.loads(c.arguments)) for c in calls] == CALLS
    single = compile_constraint(tokenizer, tool_calls=ToolCallConstraint(name, TOOLS, "required", parallel=False))
    assert single.matches_bytes(fmt.render(CALLS[:1]).encode())
    assert not single.matches_bytes(text.encode())


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_auto_mode_text_may_start_with_anything_and_precede_a_call(tokenizer, name):
    fmt = FORMATS[name]
    c = compile_constraint(tokenizer, tool_calls=ToolCallConstraint(name, TOOLS, "auto"))
    for answer in ("<b>Paris</b> is sunny.", "It is 20 C.", "{not a call}", ""):
        if fmt.anchored and answer.startswith(fmt.opener):
            continue
        assert c.matches_bytes(answer.encode()), answer
    if not fmt.anchored:
        text = "Let me check that. " + fmt.render(CALLS[:1])
        assert c.matches_bytes(text.encode())
        content, calls = fmt.parse_calls(text, list(TOOLS))
        assert content == "Let me check that." and calls[0].name == "get_weather"
        assert not c.matches_bytes(("Let me check. " + fmt.render([("get_weather", {"days": 9})])).encode())


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_streaming_deltas_in_openai_shape(name):
    fmt = FORMATS[name]
    text = "Checking. " + fmt.render(CALLS) if not fmt.anchored else fmt.render(CALLS)
    parser = StreamingCallParser(fmt, list(TOOLS))
    steps = [parser.feed(ch) for ch in text] + parser.finish()
    content = "".join(s.content for s in steps)
    assembled: dict[int, dict] = {}
    for step in steps:
        indices = [d.index for d in step.calls]
        assert len(indices) == len(set(indices)), "two deltas for one call index in one step"
        for d in step.calls:
            if d.index not in assembled:
                assert d.id and d.name and d.arguments == "", "a call's first delta carries id, name and ''"
                assembled[d.index] = {"id": d.id, "name": d.name, "arguments": ""}
            else:
                assert d.id is None and d.name is None
                assembled[d.index]["arguments"] += d.arguments
    assert fmt.opener not in content and "tool_call" not in content
    assert content.strip() == ("" if fmt.anchored else "Checking.")
    assert [(a["name"], json.loads(a["arguments"])) for a in assembled.values()] == CALLS
    assert [c.id for c in parser.calls()] == [a["id"] for a in assembled.values()]


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_truncated_call_keeps_partial_arguments_not_markup(name):
    fmt = FORMATS[name]
    text = fmt.render(CALLS[:1])
    cut = text[:text.index("Paris") + 3]
    content, calls = fmt.parse_calls(cut, list(TOOLS))
    assert content is None and len(calls) == 1 and calls[0].name == "get_weather"
    assert not calls[0].complete
    args = CALLS[0][1]
    assert calls[0].arguments and (json.dumps(args).startswith(calls[0].arguments)
                                   or json.dumps(args, separators=(",", ":")).startswith(calls[0].arguments))
    parser = StreamingCallParser(fmt, list(TOOLS))
    steps = [parser.feed(cut)] + parser.finish()
    assert "".join(s.content for s in steps) == ""
    assert parser.calls()[0].name == "get_weather"


def test_plain_text_is_content_and_a_held_opener_prefix_is_released():
    fmt = get_format("hermes")
    parser = StreamingCallParser(fmt, list(TOOLS))
    first = parser.feed("1 < 2 and <tool")
    assert first.content == "1 < 2 and " and not first.calls
    rest = parser.finish()
    assert "".join(s.content for s in rest) == "<tool"
    assert fmt.parse_calls("Hello there", list(TOOLS)) == ("Hello there", [])


class Unit(str, enum.Enum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Place(pydantic.BaseModel):
    city: str
    country: Optional[str] = None


class Forecast(pydantic.BaseModel):
    place: Place
    unit: Unit
    days: int = pydantic.Field(ge=1, le=5)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_pydantic_tool_refs_resolve_against_the_tools_own_parameters(tokenizer, name):
    tool = openai.pydantic_function_tool(Forecast)
    spec = ToolSpec.from_openai(tool)
    c = compile_constraint(tokenizer, tool_calls=ToolCallConstraint(name, (WEATHER, spec), "required"))
    fmt = FORMATS[name]
    good = {"place": {"city": "Oslo", "country": None}, "unit": "celsius", "days": 2}
    text = fmt.render([("Forecast", good)])
    assert c.matches_bytes(text.encode())
    jsonschema.validate(fmt.parse_calls(text, [spec])[1][0].arguments_value(), tool["function"]["parameters"])
    for bad in ({**good, "days": 0}, {**good, "unit": "kelvin"}, {**good, "place": {"city": 3, "country": None}}):
        assert not c.matches_bytes(fmt.render([("Forecast", bad)]).encode()), bad


def test_unsupported_keyword_is_refused_naming_tool_keyword_and_pointer(tokenizer):
    # (an unknown format is an annotation, not a refusal; a lookbehind pattern cannot be enforced)
    bad = ToolSpec("lookup", {"type": "object", "properties": {"when": {"type": "string", "pattern": "(?<=a)b"}}})
    with pytest.raises(ToolSchemaError) as info:
        compile_constraint(tokenizer, tool_calls=ToolCallConstraint("hermes", (WEATHER, bad), "auto"))
    err = info.value
    assert (err.index, err.tool, err.keyword, err.pointer) == (1, "lookup", "pattern", "#/properties/when")
    assert "tools[1].function.parameters" in str(err) and "'lookup'" in str(err)
    whole = ToolSpec("pair", {"type": "object", "minProperties": 1, "required": ["x"],
                           "properties": {"x": {"type": "integer"}}})
    with pytest.raises(ToolSchemaError) as info:
        compile_constraint(tokenizer, tool_calls=ToolCallConstraint("pythonic", (whole,), "auto"))
    assert (info.value.keyword, info.value.pointer) == ("minProperties", "#/minProperties")
    # The JSON formats enforce the same keyword exactly.
    c = compile_constraint(tokenizer, tool_calls=ToolCallConstraint("hermes", (whole,), "required"))
    assert not c.matches_bytes(b'<tool_call>{"name":"pair","arguments":{}}</tool_call>')


def test_tools_with_answer_schema(tokenizer):
    answer = {"type": "object", "properties": {"temp": {"type": "integer", "maximum": 60}}, "required": ["temp"]}
    c = compile_constraint(tokenizer, tool_calls=ToolCallConstraint("hermes", TOOLS, "auto", answer_schema=answer))
    assert c.matches_bytes(b'{"temp":21}')
    assert not c.matches_bytes(b'{"temp":99}') and not c.matches_bytes(b"It is warm.")
    assert c.matches_bytes(FORMATS["hermes"].render(CALLS).encode())


def test_triggered_constraint(tokenizer):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}, "required": ["n"]}
    c = compile_constraint(tokenizer, triggers=[{"trigger": "<json>", "json_schema": schema},
                                                {"trigger": "ANSWER:", "choices": [" yes", " no"]}])
    for text, ok in [("free <text> here", True), ("x <json>{\"n\":2}", True), ("<json>{\"n\":7}", False),
                     ("so ANSWER: yes", True), ("ANSWER: maybe", False), ("<jso", True), ("a<json>b", False)]:
        assert c.matches_bytes(text.encode()) is ok, text
    with pytest.raises(ValueError, match="triggers\\[0\\] needs exactly one of"):
        compile_constraint(tokenizer, triggers=[{"trigger": "x"}])


def test_constraint_starts_after_reasoning(tokenizer):
    c = compile_constraint(tokenizer, json_schema={"type": "integer", "maximum": 10}, reasoning=("<think>", "</think>"))
    for text, ok in [("7", True), ("<think>maybe 99?</think>\n\n7", True), ("so 3</think>7", False),
                     ("<think>x</think>99", False), ("<think>x</think>seven", False), ("<think>no end", False)]:
        assert c.matches_bytes(text.encode()) is ok, text
    opened = compile_constraint(tokenizer, json_schema={"type": "integer"}, reasoning=("", "</think>"))
    assert opened.matches_bytes(b"so 3</think>\n7") and not opened.matches_bytes(b"7")


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_after_a_complete_call_the_turn_may_end_and_no_whitespace_leads_on(tokenizer, name):
    """With parallel calls allowed, the end of the turn is in the mask right after a complete call,
    and no token there is whitespace: a newline the model writes to end its line must not be the
    only way on, forced into another call (issue 25: SmolLM2 ranks the newline above the end)."""
    fmt = FORMATS[name]
    c = compile_constraint(tokenizer, tool_calls=ToolCallConstraint(name, TOOLS, "required", parallel=True))
    matcher = c.matcher()
    for t in tokenizer.encode(fmt.render(CALLS[:1]), add_bos=False):
        assert matcher.advance(t)
    allowed = set(matcher.allowed_token_ids().tolist())
    eos = set(c.table.eos_ids.tolist())
    assert allowed & eos
    assert all(tokenizer.decode([t]).strip() for t in allowed - eos), \
        sorted(repr(tokenizer.decode([t])) for t in allowed - eos if not tokenizer.decode([t]).strip())
