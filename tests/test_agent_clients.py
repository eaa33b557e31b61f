"""Agent libraries against a real sgrun server, one smoke test each: an agent with one tool and a
typed output (langchain-openai, pydantic-ai, openai-agents, instructor). Each sends what it sends
to OpenAI (tools with $defs, tools + response_format, named tool_choice, role: tool turns).

The libraries are the `agents` extra, not `test` (about 2 minutes more to install on CI), and the
module is slow-marked (about a minute): `pip install -e .[test,agents]; pytest -m slow
tests/test_agent_clients.py`."""

from __future__ import annotations

import asyncio

import openai
import pydantic
import pytest

from sgrun.server.app import build_app
from sgrun.server.background import ServerThread

pytestmark = pytest.mark.slow

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
    """A 135M model calls a tool it is offered every time; offering it once lets the run end in
    the typed answer (the next request has no tools, only response_format)."""
    return not CALLS


@pytest.fixture(scope="module")
def base_url(shared_engine):
    with ServerThread(build_app(shared_engine)) as srv:
        yield srv.url + "/v1"


@pytest.fixture(scope="module")
def model(base_url):
    return openai.OpenAI(base_url=base_url, api_key="unused").models.list().data[0].id


def test_langchain_openai(base_url, model):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=base_url, api_key="unused", model=model, temperature=0, max_tokens=60)
    weather_tool = tool(get_weather, args_schema=CityArgs)
    reply = llm.bind_tools([weather_tool], tool_choice="required", parallel_tool_calls=False).invoke(
        "What's the weather in Paris?")
    assert reply.tool_calls and reply.tool_calls[0]["name"] == "get_weather"
    assert isinstance(reply.tool_calls[0]["args"]["city"], str)
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
