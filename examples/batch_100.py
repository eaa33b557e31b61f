"""`run_batch` over 100 inputs with a progress bar: all programs run concurrently and share the
system prompt, which run_batch prefills once."""

from __future__ import annotations

import sgrun
from _common import default_backend, max_tokens

PRODUCTS = ["phone", "laptop", "kettle", "bicycle", "lamp", "backpack", "headphones", "chair", "tent", "watch"]
OPINIONS = ["works perfectly", "broke after a week", "is fine for the price", "arrived late and scratched",
            "exceeded my expectations", "is noisy but useful", "was a waste of money", "I use every day",
            "looks cheap", "is the best purchase this year"]


@sgrun.function
def review(s, text: str, limit: int):
    s += sgrun.system("You classify product reviews as positive or negative and summarise them in a few words.")
    s += sgrun.user(f"Review: {text}")
    s += sgrun.assistant("Sentiment: " + sgrun.select("sentiment", choices=["positive", "negative"])
                         + "\nSummary:" + sgrun.gen("summary", max_tokens=limit, stop="\n"))


def main(backend: sgrun.Runtime | None = None, count: int = 100) -> list[sgrun.ProgramState]:
    backend = backend or default_backend()
    reviews = [f"The {p} {o}." for p in PRODUCTS for o in OPINIONS][:count]
    inputs = [{"text": text, "limit": max_tokens(16)} for text in reviews]
    states = review.run_batch(inputs, backend=backend, progress_bar=True, temperature=0)
    failed = [s for s in states if s.error() is not None]
    positive = sum(s["sentiment"] == "positive" for s in states if s.error() is None)
    print(f"{len(states)} reviews: {positive} positive, {len(states) - positive - len(failed)} negative, "
          f"{len(failed)} failed")
    for inp, state in list(zip(inputs, states))[:3]:
        print(f"  {inp['text']!r}: {state['sentiment']}, {state['summary']!r}")
    return states


if __name__ == "__main__":
    main()
