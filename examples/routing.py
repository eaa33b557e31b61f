"""Route a request with `select`, then continue with the branch the model chose."""

from __future__ import annotations

import sgrun
from _common import default_backend, max_tokens

ROUTES = ["math", "weather", "small talk"]


@sgrun.function
def route(s, question: str, limit: int):
    s += sgrun.system("You sort questions into categories, then answer them.")
    s += sgrun.user(question)
    s += sgrun.assistant("This question is about " + sgrun.select("route", choices=ROUTES) + ".")
    if s["route"] == "math":
        s += sgrun.user("Answer with just the number.")
        s += sgrun.assistant(sgrun.gen("answer", max_tokens=min(limit, 8), regex=r"-?[0-9]{1,8}"))
    elif s["route"] == "weather":
        s += sgrun.user("Say that you cannot see live weather, and suggest a forecast website.")
        s += sgrun.assistant(sgrun.gen("answer", max_tokens=limit))
    else:
        s += sgrun.user("Reply in a friendly way.")
        s += sgrun.assistant(sgrun.gen("answer", max_tokens=limit))


def main(backend: sgrun.Runtime | None = None) -> list[sgrun.ProgramState]:
    backend = backend or default_backend()
    questions = ["What is 12 + 30?", "Will it rain in London tomorrow?", "Hello, how are you today?"]
    states = route.run_batch([{"question": q, "limit": max_tokens(32)} for q in questions],
                             backend=backend, temperature=0)
    for question, state in zip(questions, states):
        print(f"{question!r} -> {state['route']}: {state['answer']!r}")
    return states


if __name__ == "__main__":
    main()
