"""Multi-turn chat: each turn's prompt extends the previous one, so it is served from the cache."""

from __future__ import annotations

import sgrun
from _common import default_backend, max_tokens


@sgrun.function
def chat(s, turns: list[str], reply_tokens: int):
    s += sgrun.system("You are a friendly, concise assistant.")
    for i, question in enumerate(turns):
        s += sgrun.user(question)
        s += sgrun.assistant(sgrun.gen(f"reply_{i}", max_tokens=reply_tokens))


def main(backend: sgrun.Runtime | None = None) -> sgrun.ProgramState:
    backend = backend or default_backend()
    turns = ["Hi! What is a good name for a cat?", "Why that name?", "Suggest one more."]
    state = chat.run(turns=turns, reply_tokens=max_tokens(48), backend=backend, temperature=0)
    for message in state.messages():
        print(f"{message['role']:>9}: {message['content']}")
    for call in state.calls:
        print(f"{call['name']}: {call['prompt_tokens']} prompt tokens, {call['cached_tokens']} from the cache")
    return state


if __name__ == "__main__":
    main()
