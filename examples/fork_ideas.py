"""Fork/join: three ideas are generated in parallel from one shared prefix, then one is picked."""

from __future__ import annotations

import sgrun
from _common import default_backend, max_tokens


@sgrun.function
def brainstorm(s, topic: str, limit: int):
    s += sgrun.system("You are a creative assistant. Keep ideas to one sentence.")
    s += sgrun.user(f"Give me an idea for {topic}.")
    forks = s.fork(3)
    for i, f in enumerate(forks):
        f += sgrun.assistant(f"Idea {i + 1}:" + sgrun.gen("idea", max_tokens=limit, stop="\n", temperature=0.8, seed=i))
    ideas = [f["idea"].strip() for f in forks]     # waits for the three forks
    s += sgrun.user("Here are three ideas:\n" + "\n".join(f"{i + 1}. {idea}" for i, idea in enumerate(ideas))
                    + "\nWhich one is best? Reply with its number.")
    s += sgrun.assistant("The best idea is number " + sgrun.select("best", choices=["1", "2", "3"]) + ".")
    s.set_var("ideas", ideas)
    s.set_var("cached_tokens", [f.get_meta_info("idea")["cached_tokens"] for f in forks])


def main(backend: sgrun.Runtime | None = None) -> sgrun.ProgramState:
    backend = backend or default_backend()
    state = brainstorm.run(topic="a rainy weekend", limit=max_tokens(32), backend=backend)
    for i, idea in enumerate(state["ideas"]):
        print(f"{i + 1}. {idea}")
    print(f"picked: {state['best']} (forks reused {state['cached_tokens']} cached prompt tokens)")
    return state


if __name__ == "__main__":
    main()
