"""A tool-calling agent with two tools: the model decides, sgrun calls the Python function and
feeds the result back until the model answers."""

from __future__ import annotations

import sgrun
from _common import default_backend, max_tokens


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    return a * b


def get_weather(city: str) -> dict:
    """Get the current weather in a city.

    Args:
        city: the city's name, e.g. Paris
    """
    return {"city": city, "temperature_c": 18, "sky": "cloudy"}


def main(backend: sgrun.Runtime | None = None) -> sgrun.AgentResult:
    backend = backend or default_backend()
    agent = sgrun.Agent(tools=[multiply, get_weather], system="You are a helpful assistant. Use tools.",
                        max_steps=2, max_tokens=max_tokens(32), call_max_tokens=max(32, max_tokens(48)))
    # A 135M model rarely chooses a tool on its own: require a call on the first turn.
    result = agent.run("What is 17 * 23?", backend=backend, tool_choice="required")
    for call in result.tool_calls:
        print(f"called {call.name}({call.arguments}) -> {call.error or call.result!r}")
    print(f"answer ({result.finish_reason}): {result.answer}")
    return result


if __name__ == "__main__":
    main()
