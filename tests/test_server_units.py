"""Server pieces that need no engine: tool-call parsing (whole and streamed), the tool-call
constraint modes, message rendering, error mapping, SSE framing and the request guard."""

from __future__ import annotations

import json

import msgspec
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from sgrun.server.chat_prompt import template_messages
from sgrun.server.errors import APIError, from_decode_error, from_exception
from sgrun.server.guards import RequestGuard
from sgrun.server.protocol import (ChatCompletionRequest, ChatMessage, FunctionCall, FunctionDef, ToolCall,
                                   ToolChoiceFunction, ToolChoiceNamed, ToolDef)
from sgrun.server.field_mapping import FieldNames
from sgrun.server.sse import DONE, sse
from sgrun.constrain import compile_constraint
from sgrun.constrain.tool_calls import StreamingCallParser, get_format
from sgrun.server.tool_format import call_constraint, response_calls, tool_specs
from sgrun.server.tool_plan import plan_tools
from sgrun.errors import InvalidRequestError

WEATHER = ToolDef(FunctionDef("get_weather", "weather", {"type": "object", "properties": {"city": {"type": "string"}},
                                                         "required": ["city"]}))
ADD = ToolDef(FunctionDef("add", None, {"type": "object", "properties": {"a": {"type": "integer"},
                                                                        "b": {"type": "integer"}},
                                        "required": ["a", "b"]}))
TWO_CALLS = ('<tool_call>{"name":"get_weather","arguments":{"city":"Paris \\"x\\" {"}}</tool_call>\n'
             '<tool_call>{"name":"add","arguments":{"a":1,"b":2}}</tool_call>')


HERMES = get_format("hermes")


def test_response_calls_whole():
    content, calls = response_calls(HERMES, TWO_CALLS, plan_tools([WEATHER, ADD], "auto", None))
    assert content is None and [c.function.name for c in calls] == ["get_weather", "add"]
    assert json.loads(calls[0].function.arguments) == {"city": 'Paris "x" {'}
    assert calls[0].id != calls[1].id
    plan = plan_tools([WEATHER, ADD], "auto", None)
    assert response_calls(HERMES, "Hello there", plan) == ("Hello there", None)
    content, calls = response_calls(HERMES, '<tool_call>{"name":"add","arguments":{"a":1', plan)  # truncated
    assert content is None and calls[0].function.name == "add" and calls[0].function.arguments == '{"a":1'


@pytest.mark.parametrize("step", [1, 2, 3, 5, 11, 1000])
def test_streaming_tool_parser_matches_whole_parse(step):
    plan = plan_tools([WEATHER, ADD], "auto", None)
    parser = StreamingCallParser(HERMES, tool_specs(plan.tools))
    steps = [parser.feed(TWO_CALLS[i:i + step]) for i in range(0, len(TWO_CALLS), step)] + parser.finish()
    assert "".join(s.content for s in steps) == ""
    deltas = [d for s in steps for d in s.calls]
    assert [(d.index, d.name) for d in deltas if d.name] == [(0, "get_weather"), (1, "add")]
    args: dict[int, str] = {}
    for d in deltas:
        args[d.index] = args.get(d.index, "") + d.arguments
    _, whole = response_calls(HERMES, TWO_CALLS, plan)
    assert [json.loads(args[i]) for i in (0, 1)] == [json.loads(c.function.arguments) for c in whole]


def test_streaming_tool_parser_passes_text_through():
    parser = StreamingCallParser(HERMES, [])
    out = "".join(parser.feed(ch).content for ch in "  Hello <b> world") + "".join(s.content for s in parser.finish())
    assert out == "  Hello <b> world"
    parser = StreamingCallParser(HERMES, [])
    assert parser.feed("<tool").content == ""                      # could still become a call: held back
    assert "".join(s.content for s in parser.finish()) == "<tool"  # ...but never did


def test_call_constraint_modes(tokenizer):
    def compiled(choice, parallel=None):
        plan = plan_tools([WEATHER, ADD], choice, parallel)
        return compile_constraint(tokenizer, tool_calls=call_constraint(HERMES, plan, None))
    auto, required, single = compiled("auto"), compiled("required"), compiled("required", False)
    named = compiled(ToolChoiceNamed(ToolChoiceFunction("add")))
    one = b'<tool_call>{"name":"add","arguments":{"a":1,"b":2}}</tool_call>'
    two = TWO_CALLS.replace("</tool_call>\n<tool_call>", "</tool_call><tool_call>").encode()
    # Calls come back to back: a newline after a call could only lead on to another call.
    assert not required.matches_bytes(TWO_CALLS.encode())
    assert auto.matches_bytes(b"Just text.") and auto.matches_bytes(two) and auto.matches_bytes(b"<b>")
    assert required.matches_bytes(two) and not required.matches_bytes(b"Just text.")
    assert single.matches_bytes(one) and not single.matches_bytes(two)
    assert named.matches_bytes(one) and not named.matches_bytes(two.split(b"</tool_call>")[0] + b"</tool_call>")
    assert not required.matches_bytes(b'<tool_call>{"name":"add","arguments":{"a":1}}</tool_call>')


def test_plan_tools_errors():
    with pytest.raises(APIError) as e:
        plan_tools([WEATHER], ToolChoiceNamed(ToolChoiceFunction("nope")), None)
    assert e.value.param == "tool_choice"
    with pytest.raises(APIError):
        plan_tools(None, "required", None)
    with pytest.raises(APIError):
        plan_tools([WEATHER, WEATHER], "auto", None)
    assert plan_tools([WEATHER], "none", None).tools == []
    assert plan_tools([WEATHER], None, None).mode == "auto"


def test_template_messages_without_tool_support():
    call = ToolCall(id="call_1", function=FunctionCall(name="add", arguments='{"a": 1, "b": 2}'))
    msgs = [ChatMessage(role="user", content="add"), ChatMessage(role="assistant", tool_calls=[call]),
            ChatMessage(role="tool", content="3", tool_call_id="call_1")]
    out = template_messages(msgs, [ADD], template_takes_tools=False, fmt=HERMES)
    assert out[0]["role"] == "system" and "<tools>" in out[0]["content"] and '"name": "add"' in out[0]["content"]
    # A past call in json.dumps' spacing, the form the model writes it in (json_call.py).
    assert out[2]["content"] == '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    # The result in Hermes' <tool_response> tags (SmolLM2 repeats the call after an untagged one).
    assert out[3] == {"role": "tool", "content": "<tool_response>\n3\n</tool_response>"}
    with pytest.raises(APIError) as e:
        template_messages([ChatMessage(role="wizard", content="x")], [], False, HERMES)
    assert e.value.param == "messages[0].role"


def test_decode_errors_name_the_field():
    with pytest.raises(msgspec.ValidationError) as e:
        msgspec.json.decode(b'{"model": "m", "messages": [], "max_tokens": "x"}', type=ChatCompletionRequest)
    err = from_decode_error(e.value)
    assert err.status == 400 and err.param == "max_tokens"
    with pytest.raises(msgspec.DecodeError) as e2:
        msgspec.json.decode(b'{"model": ', type=ChatCompletionRequest)
    assert from_decode_error(e2.value).code == "invalid_json"
    mapped = from_exception(InvalidRequestError("bad", field="max_new_tokens"), FieldNames({"max_new_tokens": "max_tokens"}))
    assert mapped.status == 400 and mapped.param == "max_tokens"
    assert from_exception(RuntimeError("boom")).status == 500


def test_sse_framing():
    assert sse({"a": 1}) == b'data: {"a":1}\n\n'
    assert DONE == b"data: [DONE]\n\n"
    body = json.loads(APIError(400, "nope", param="x").to_sse()[6:])
    assert body == {"error": {"message": "nope", "type": "invalid_request_error", "param": "x", "code": None}}


def test_request_guard_key_and_size():
    async def echo(request):
        return JSONResponse({"n": len(await request.body())})

    inner = Starlette(routes=[Route("/v1/x", echo, methods=["POST"]), Route("/health", echo, methods=["POST"])])
    client = TestClient(RequestGuard(inner, api_key="k", max_body_bytes=100))
    assert client.post("/v1/x", content=b"{}").status_code == 401
    assert client.post("/v1/x", content=b"{}", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.post("/v1/x", content=b"{}", headers={"Authorization": "Bearer k"}).json() == {"n": 2}
    assert client.post("/health", content=b"{}").status_code == 200
    r = client.post("/v1/x", content=b"x" * 101, headers={"Authorization": "Bearer k"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
