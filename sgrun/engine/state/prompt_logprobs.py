"""Prompt token logprobs from an Engine, in SGLang's [logprob, token_id, token_text] shape.

Token i's logprob is given tokens < i; the prompt's first token has none (None), as in SGLang.
Built on `Engine.score`, which prefills the text once (and leaves it in the prefix cache).
"""

from __future__ import annotations

from typing import Any, Callable


def prompt_logprobs(engine: Any, ids: list[int], start: int,
                    decode: Callable[[list[int]], str] | None) -> list[list[Any]]:
    if not 0 <= start <= len(ids):
        raise ValueError(f"logprob_start_len must be in [0, {len(ids)}] (the prompt's token count), got {start}")
    if start >= len(ids):
        return []
    split = max(start, 1)
    values: list[float | None] = [None] if start == 0 else []
    if split < len(ids):
        values += [float(v) for v in engine.score(ids[:split], [ids[split:]])[0]]
    picked = ids[start:]
    return [[v, t, decode([t]) if decode else None] for v, t in zip(values, picked)]
