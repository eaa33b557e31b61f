"""The agent suite on the DEFAULT model (int4 weights, dtype auto: what `sgrun serve` runs with no
options), through a real server and the official openai client, and through sgrun.Agent.

It asserts structure, not accuracy: every call names an offered tool with arguments valid under its
schema (jsonschema), the finish reason matches what came back, a required / named / parallel=false
turn holds exactly one call, and every turn that calls ends by itself before max_tokens (a text
answer may run to the limit, as any free text may). Accuracy (the right tool with
the right arguments) is a benchmark number: benchmarks/bench_agents.py runs the same cases
(tests/data/agent_cases.json) against llama-server. The issue-25 case (`get_weather` or `search`,
"Weather in Lyon?") is checked for the right call in every tool_choice, streamed and not."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

import sgrun
from agent_cases import ISSUE_TOOLS, ISSUE_TOOLS_UNIT_OPTIONAL, AgentCase, load_cases
from server_fixtures import client_fixture, model_fixture, server_fixture

server = server_fixture(engine="default_engine")
client = client_fixture(timeout=300)
model = model_fixture()

CASES = load_cases()
MAX_TOKENS = 96
ANSWER_MAX_TOKENS = 48  # a turn after the results: the answer, or one more call (which fits)
LYON = [{"role": "user", "content": "Weather in Lyon?"}]


def chat(client, model, messages, tools, stream: bool, max_tokens: int = MAX_TOKENS, **extra: Any) -> dict[str, Any]:
    """One chat turn, streamed or not, as {content, calls [(name, arguments text)], finish, tokens}."""
    common = dict(model=model, messages=messages, tools=tools, temperature=0, max_tokens=max_tokens, **extra)
    if not stream:
        r = client.chat.completions.create(**common)
        m = r.choices[0].message
        return {"content": m.content, "finish": r.choices[0].finish_reason, "tokens": r.usage.completion_tokens,
                "calls": [(c.function.name, c.function.arguments) for c in m.tool_calls or []],
                "ids": [c.id for c in m.tool_calls or []]}
    content, calls, finish, tokens = [], {}, None, None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **common):
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        for ch in chunk.choices:
            if ch.delta.content:
                content.append(ch.delta.content)
            for d in ch.delta.tool_calls or []:
                slot = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
                if d.id:
                    assert slot["id"] is None, "a call's id comes once, in its first delta"
                    slot["id"] = d.id
                if d.function is not None and d.function.name:
                    slot["name"] = d.function.name
                if d.function is not None and d.function.arguments:
                    slot["arguments"] += d.function.arguments
            if ch.finish_reason is not None:
                finish = ch.finish_reason
    ordered = [calls[i] for i in sorted(calls)]
    assert sorted(calls) == list(range(len(calls))), "call indices count up from 0"
    return {"content": "".join(content) or None, "finish": finish, "tokens": tokens,
            "calls": [(c["name"], c["arguments"]) for c in ordered], "ids": [c["id"] for c in ordered]}


def assert_well_formed(got: dict[str, Any], tools: list[dict[str, Any]], max_tokens: int = MAX_TOKENS) -> None:
    """Calls name offered tools with schema-valid arguments, each with its own id; the finish reason
    says what came back; the turn ended by itself, before max_tokens."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for name, arguments in got["calls"]:
        assert name in schemas, got
        jsonschema.validate(json.loads(arguments), schemas[name])
    assert len(set(got["ids"])) == len(got["ids"]) and all(got["ids"]), got
    assert got["finish"] == ("tool_calls" if got["calls"] else "stop"), got
    assert got["tokens"] < max_tokens, got


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_turn_is_well_formed(client, model, case: AgentCase):
    # A turn that needs a call must make one (required); a turn after the results decides (auto).
    # parallel_tool_calls is left at OpenAI's default (true): the turn must still end by itself.
    choice = "auto" if case.wants_answer else "required"
    limit = ANSWER_MAX_TOKENS if case.wants_answer else MAX_TOKENS
    got = chat(client, model, case.messages(), case.tools, stream=False, tool_choice=choice, max_tokens=limit)
    assert len(got["calls"]) <= 1, got  # no call after the first (each case needs one)
    if got["calls"]:
        assert_well_formed(got, case.tools, max_tokens=limit)
    else:  # a text answer's length is the model's own: it may run to the limit, as free text may
        assert choice == "auto" and got["content"] and got["finish"] in ("stop", "length"), got


# Each tool_choice streamed and whole with the tools as reported; the other variant whole only
# (streamed and whole turns are the same tokens: test_streamed_and_whole_turns_agree).
ISSUE_RUNS = ([pytest.param(ISSUE_TOOLS, c, s, id=f"as-reported-{c}-{'streamed' if s else 'whole'}")
               for c in ("auto", "required", "named", "none") for s in (False, True)]
              + [pytest.param(ISSUE_TOOLS_UNIT_OPTIONAL, c, False, id=f"unit-optional-{c}-whole")
                 for c in ("auto", "required", "named")])


@pytest.mark.parametrize("tools, choice, stream", ISSUE_RUNS)
def test_issue_case_in_each_tool_choice(client, model, tools, choice, stream):
    """The report in issue 25 (temperature 0, max_tokens 80): one get_weather call for Lyon in
    auto, required and named (no more calls after it, finish "tool_calls"); text in none."""
    tool_choice = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else choice
    # none is free text, which may run to the limit: a shorter one keeps the suite quick.
    got = chat(client, model, LYON, tools, stream=stream, max_tokens=24 if choice == "none" else 80,
               tool_choice=tool_choice)
    if choice == "none":
        assert got["calls"] == [] and got["content"] and "<tool_call>" not in got["content"], got
        assert got["finish"] in ("stop", "length"), got  # free text may run to the limit
        return
    assert_well_formed(got, tools, max_tokens=80)
    assert len(got["calls"]) == 1, got
    name, arguments = got["calls"][0]
    assert name == "get_weather" and json.loads(arguments)["city"] == "Lyon", got


def test_streamed_and_whole_turns_agree(client, model):
    case = next(c for c in CASES if c.id == "currency_3")
    whole = chat(client, model, case.messages(), case.tools, stream=False, tool_choice="required")
    streamed = chat(client, model, case.messages(), case.tools, stream=True, tool_choice="required")
    assert (whole["calls"], whole["finish"], whole["tokens"]) == (streamed["calls"], streamed["finish"],
                                                                  streamed["tokens"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_parallel_false_is_exactly_one_call(client, model, stream):
    case = next(c for c in CASES if c.id == "flight_4")
    got = chat(client, model, case.messages(), case.tools, stream=stream, tool_choice="required",
               parallel_tool_calls=False)
    assert_well_formed(got, case.tools)
    assert len(got["calls"]) == 1, got


def test_after_a_call_the_end_is_the_likeliest_allowed_token(server, default_engine):
    """Masks and logits together, on the default model: after one complete call (parallel calls
    allowed), the end of the turn is in the mask and is the allowed token the model ranks first; the
    tokens that would begin another call are not whitespace (a newline the model means as the end
    of its line is never forced into `<tool_call>`)."""
    import httpx

    from sgrun.constrain import compile_constraint
    from sgrun.constrain.tool_calls import ToolCallConstraint, ToolSpec, get_format

    fmt = get_format("hermes")
    tok = default_engine.tokenizer
    h = httpx.Client(base_url=server.url, timeout=120)
    prompt = h.post("/apply_chat_template", json={"messages": LYON, "tools": ISSUE_TOOLS}).json()["text"]
    call = fmt.render([("get_weather", {"city": "Lyon", "unit": "c"})])
    constraint = compile_constraint(tok, tool_calls=ToolCallConstraint(
        "hermes", tuple(ToolSpec.from_openai(t) for t in ISSUE_TOOLS), "required", parallel=True))
    matcher = constraint.matcher()
    for t in tok.encode(call, add_bos=False):
        assert matcher.advance(t)
    allowed = set(matcher.allowed_token_ids().tolist())
    eos = set(constraint.table.eos_ids.tolist())
    assert allowed & eos, "the end of the turn is allowed after a complete call"
    for t in allowed - eos:
        assert tok.decode([t]).strip(), f"token {t!r} ({tok.decode([t])!r}) is whitespace that leads to a call"
    model_id = h.get("/v1/models").json()["data"][0]["id"]
    r = h.post("/v1/completions", json={"model": model_id, "prompt": prompt + call, "max_tokens": 1,
                                        "temperature": 0, "logprobs": 20}).json()
    top = r["choices"][0]["logprobs"]["top_logprobs"][0]
    ranked = [text for text, _ in sorted(top.items(), key=lambda kv: -kv[1])]
    allowed_texts = {tok.decode([t]) for t in allowed}
    first_allowed = next(text for text in ranked if text in allowed_texts)
    assert first_allowed in {tok.decode([t]) for t in eos}, (first_allowed, ranked)


# --- sgrun.Agent on the same engine ----------------------------------------------------------

def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather in a city."""
    return f"{city}: 18 C, cloudy"


def search(query: str) -> str:
    """Search the web."""
    return f"Results for {query}: nothing found."


def set_timer(minutes: int) -> str:
    """Start a countdown timer for a number of minutes."""
    return f"timer set for {minutes} minutes"


@pytest.fixture(scope="module")
def runtime(default_engine):
    return sgrun.Runtime(engine=default_engine)


@pytest.mark.parametrize("question, tool", [("Weather in Lyon?", "get_weather"),
                                            ("Set a timer for 10 minutes", "set_timer")])
def test_agent_loop_calls_then_answers(runtime, question, tool):
    agent = sgrun.Agent(tools=[get_weather, search, set_timer], tool_choice="required", max_steps=3,
                        max_tokens=32, call_max_tokens=64)
    result = agent.run(question, backend=runtime)
    assert result.tool_calls, result
    first = result.tool_calls[0]
    assert first.error is None and first.name in {"get_weather", "search", "set_timer"}, first
    assert first.name == tool, first
    assert result.finish_reason in ("answer", "max_steps")
    assert len(result.tool_calls) <= 3
