"""Agent libraries against a real sgrun server on the DEFAULT model (int4, dtype auto), each running
a short tool-calling loop (the model calls, the tool runs, its result goes back, the turn after it
answers): the openai SDK's parse() with pydantic tools and its .stream() helper, langchain-openai,
pydantic-ai, openai-agents, instructor and litellm. Each sends what it sends to OpenAI (tools with
$defs, tools + response_format, named tool_choice, role: tool turns, streamed tool-call deltas).

Tools together with a typed answer (response_format) run as each library's user writes them, with
nothing to stop the model calling again: pydantic-ai's NativeOutput with a tool_plain,
openai-agents' output_type with a function_tool, langchain's with_structured_output(tools=...).
Each calls the tool once and ends in the typed answer carrying the tool's result
(sgrun/server/tool_decision.py says why they used to loop).

The libraries are the `agents` extra (pyproject.toml); the module runs in the default test run."""

from __future__ import annotations

import asyncio
import json
import os

import openai
import pydantic
import pytest

from sgrun.server.app import build_app
from server_thread import ServerThread

# litellm fetches a model price list from GitHub at import unless told to use its own copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

CALLS: list[str] = []


class Weather(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=20)
    temperature_c: int = pydantic.Field(ge=-50, le=60)


class CityArgs(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=20, description="the city's name")


def get_weather(city: str) -> str:
    """Current weather in a city."""
    CALLS.append(city)
    return f"{city}: 21 C, sunny"


def tool_not_called_yet(*_: object) -> bool:
    """Offers the tool until it has been called: the run's next request then has no tools, only
    response_format (the path a library takes when a tool is disabled mid-run). The same agents
    with the tool always offered are the *_ends tests below."""
    return not CALLS


@pytest.fixture(scope="module")
def base_url(default_engine):
    with ServerThread(build_app(default_engine)) as srv:
        yield srv.url + "/v1"


@pytest.fixture(scope="module")
def model(base_url):
    return openai.OpenAI(base_url=base_url, api_key="unused").models.list().data[0].id


def test_langchain_openai(base_url, model):
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=base_url, api_key="unused", model=model, temperature=0, max_tokens=60)
    weather_tool = tool(get_weather, args_schema=CityArgs)
    question = HumanMessage("What's the weather in Paris?")
    CALLS.clear()
    reply = llm.bind_tools([weather_tool], tool_choice="required", parallel_tool_calls=False).invoke([question])
    assert len(reply.tool_calls) == 1 and reply.tool_calls[0]["name"] == "get_weather"
    assert isinstance(reply.tool_calls[0]["args"]["city"], str)
    result = weather_tool.invoke(reply.tool_calls[0])  # a ToolMessage answering that call's id
    answer = llm.bind_tools([weather_tool], tool_choice="none").invoke([question, reply, result])
    assert answer.content and not answer.tool_calls and len(CALLS) == 1
    typed = llm.with_structured_output(Weather, method="json_schema").invoke("Paris is 21 C. Report it.")
    assert isinstance(typed, Weather)


def test_instructor_tools_mode(base_url, model):
    import instructor

    client = instructor.from_openai(openai.OpenAI(base_url=base_url, api_key="unused"), mode=instructor.Mode.TOOLS)
    got = client.chat.completions.create(model=model, response_model=Weather, max_retries=0, temperature=0,
                                         max_tokens=60, messages=[{"role": "user", "content": "Paris, 21 C."}])
    assert isinstance(got, Weather) and -50 <= got.temperature_c <= 60


def test_openai_agents(base_url, model):
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    CALLS.clear()
    chat_model = OpenAIChatCompletionsModel(model=model, openai_client=openai.AsyncOpenAI(base_url=base_url,
                                                                                          api_key="unused"))
    agent = Agent(name="weather", instructions="Answer with the weather.", model=chat_model,
                  tools=[function_tool(get_weather, is_enabled=tool_not_called_yet)], output_type=Weather,
                  model_settings=ModelSettings(temperature=0, max_tokens=60, parallel_tool_calls=False))
    result = asyncio.run(Runner.run(agent, "What's the weather in Paris?", max_turns=4))
    assert isinstance(result.final_output, Weather)
    assert len(CALLS) == 1  # the first request (tools + response_format) called the tool


def test_pydantic_ai_native_output(base_url, model):
    from pydantic_ai import Agent, NativeOutput, Tool
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async def once(ctx, tool_def):
        return tool_def if tool_not_called_yet() else None

    CALLS.clear()
    chat_model = OpenAIChatModel(model, provider=OpenAIProvider(base_url=base_url, api_key="unused"))
    agent = Agent(chat_model, output_type=NativeOutput(Weather), tools=[Tool(get_weather, prepare=once)],
                  model_settings={"temperature": 0, "max_tokens": 60, "parallel_tool_calls": False})
    result = agent.run_sync("What's the weather in Paris?")
    assert isinstance(result.output, Weather)
    assert len(CALLS) <= 1


def test_pydantic_ai_native_output_with_a_plain_tool_ends(base_url, model):
    """The shape that looped to pydantic-ai's request limit of 50: one call, then the answer."""
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    CALLS.clear()
    chat_model = OpenAIChatModel(model, provider=OpenAIProvider(base_url=base_url, api_key="unused"))
    agent = Agent(chat_model, output_type=NativeOutput(Weather),
                  model_settings={"temperature": 0, "max_tokens": 60})
    agent.tool_plain(get_weather)
    result = agent.run_sync("What's the weather in Paris?", usage_limits=UsageLimits(request_limit=4))
    assert isinstance(result.output, Weather) and result.output.temperature_c == 21
    assert CALLS == ["Paris"] and result.usage.requests == 2


def test_openai_agents_output_type_with_a_plain_tool_ends(base_url, model):
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    CALLS.clear()
    chat_model = OpenAIChatCompletionsModel(model=model, openai_client=openai.AsyncOpenAI(base_url=base_url,
                                                                                          api_key="unused"))
    agent = Agent(name="weather", instructions="Answer with the weather.", model=chat_model,
                  tools=[function_tool(get_weather)], output_type=Weather,
                  model_settings=ModelSettings(temperature=0, max_tokens=60))
    result = asyncio.run(Runner.run(agent, "What's the weather in Paris?", max_turns=4))
    assert isinstance(result.final_output, Weather) and result.final_output.temperature_c == 21
    assert CALLS == ["Paris"]


def test_langchain_structured_output_with_tools_ends(base_url, model):
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    CALLS.clear()
    weather_tool = tool(get_weather, args_schema=CityArgs)
    llm = ChatOpenAI(base_url=base_url, api_key="unused", model=model, temperature=0, max_tokens=60)
    typed = llm.with_structured_output(Weather, method="json_schema", tools=[weather_tool], strict=True,
                                       include_raw=True)   # parse() takes strict tools only
    messages: list = [HumanMessage("What's the weather in Paris?")]
    for _ in range(4):   # the agent loop a user writes: run the calls, send the results, ask again
        out = typed.invoke(messages)
        if not out["raw"].tool_calls:
            break
        messages += [out["raw"], *(weather_tool.invoke(call) for call in out["raw"].tool_calls)]
    assert isinstance(out["parsed"], Weather) and out["parsed"].temperature_c == 21
    assert CALLS == ["Paris"]


def weather_loop_turns(client: openai.OpenAI, model: str, first_call) -> str:
    """Run the call the model made, send its result back as a role: tool turn, and return the answer
    of the turn after it (tool_choice none: the model answers in text)."""
    call = first_call.tool_calls[0]
    result = get_weather(**json.loads(call.function.arguments))
    reply = client.chat.completions.create(
        model=model, temperature=0, max_tokens=40, tools=[openai.pydantic_function_tool(CityArgs, name="get_weather")],
        tool_choice="none", messages=[
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump(include={"id", "type", "function"})]},
            {"role": "tool", "tool_call_id": call.id, "content": result}])
    assert reply.choices[0].message.tool_calls is None
    return reply.choices[0].message.content


def test_openai_parse_with_pydantic_tool(base_url, model):
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    CALLS.clear()
    got = client.chat.completions.parse(
        model=model, temperature=0, max_tokens=60, tools=[openai.pydantic_function_tool(CityArgs, name="get_weather")],
        tool_choice="required", parallel_tool_calls=False,
        messages=[{"role": "user", "content": "What's the weather in Paris?"}])
    message = got.choices[0].message
    assert got.choices[0].finish_reason == "tool_calls" and len(message.tool_calls) == 1
    assert isinstance(message.tool_calls[0].function.parsed_arguments, CityArgs)
    answer = weather_loop_turns(client, model, message)
    assert CALLS and answer


def test_openai_stream_helper_with_pydantic_tool(base_url, model):
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    CALLS.clear()
    with client.chat.completions.stream(
            model=model, temperature=0, max_tokens=60, tools=[openai.pydantic_function_tool(CityArgs, name="get_weather")],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            messages=[{"role": "user", "content": "What's the weather in Paris?"}]) as stream:
        kinds = {event.type for event in stream}
        final = stream.get_final_completion()
    assert {"tool_calls.function.arguments.delta", "tool_calls.function.arguments.done"} <= kinds
    message = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls" and len(message.tool_calls) == 1
    assert isinstance(message.tool_calls[0].function.parsed_arguments, CityArgs)
    assert weather_loop_turns(client, model, message)


def test_litellm_tool_loop(base_url, model):
    import litellm

    CALLS.clear()
    tool = openai.pydantic_function_tool(CityArgs, name="get_weather")
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    common = dict(model=f"openai/{model}", api_base=base_url, api_key="unused", temperature=0, max_tokens=60,
                  tools=[tool])
    first = litellm.completion(messages=messages, tool_choice="required", **common)
    calls = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls" and len(calls) == 1
    assert calls[0].function.name == "get_weather"
    result = get_weather(**json.loads(calls[0].function.arguments))
    messages += [first.choices[0].message.model_dump(include={"role", "content", "tool_calls"}),
                 {"role": "tool", "tool_call_id": calls[0].id, "content": result}]
    answer = litellm.completion(messages=messages, tool_choice="none", **common)
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls
    assert CALLS == [json.loads(calls[0].function.arguments)["city"]]
