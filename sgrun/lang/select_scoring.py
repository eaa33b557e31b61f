"""`select`: score every choice's tokens after the program's text and let the choices_method pick."""

from __future__ import annotations

import math
import random
from typing import Any

from sgrun.lang.backend import Backend
from sgrun.lang.choices import TokenLengthNormalized
from sgrun.lang.ir import Select


def run_select(backend: Backend, text: str, sel: Select) -> tuple[str, dict[str, Any]]:
    """(the chosen string, its meta information)."""
    # Trailing spaces go with the choices: "use a " + "calculator" scores " calculator", the
    # token the model would really produce, instead of a bare word after a lone space.
    prompt = text.rstrip(" ")
    moved = text[len(prompt):]
    continuations = [moved + c for c in sel.choices]
    scored = backend.score(prompt, continuations)
    normalized = [sum(lps) / len(lps) if lps else -math.inf for lps in scored.logprobs]
    inputs: list[list[list[Any]]] = []
    for i, lps in enumerate(scored.logprobs):
        ids = scored.token_ids[i] if scored.token_ids else [None] * len(lps)
        toks = scored.tokens[i] if scored.tokens else [None] * len(lps)
        inputs.append([[lp, tid, tok] for lp, tid, tok in zip(lps, ids, toks)])
    outputs: list[list[Any]] = [[] for _ in sel.choices]
    unconditional = None
    if sel.choices_method.requires_unconditional_logprobs:
        # The same tokens without the program's text; by id where the backend reported them, so
        # both lists line up token for token.
        unconditional = [backend.input_logprobs(ids if scored.token_ids else cont, 0)
                         for ids, cont in zip(scored.token_ids or [None] * len(continuations), continuations)]
    if sel.temperature > 0 and isinstance(sel.choices_method, TokenLengthNormalized):
        # sgrun's sampled select: a softmax over the normalised logprobs at that temperature.
        top = max(normalized)
        weights = [math.exp((x - top) / sel.temperature) for x in normalized]
        decision_text = sel.choices[random.choices(range(len(sel.choices)), weights=weights)[0]]
        decision_meta = {"normalized_prompt_logprobs": normalized, "input_token_logprobs": inputs,
                         "output_token_logprobs": outputs}
    else:
        decision = sel.choices_method(choices=list(sel.choices), normalized_prompt_logprobs=normalized,
                                      input_token_logprobs=inputs, output_token_logprobs=outputs,
                                      unconditional_token_logprobs=unconditional)
        decision_text, decision_meta = decision.decision, dict(decision.meta_info or {})
    meta = {"kind": "select", "name": sel.name, "text": decision_text, "choices": list(sel.choices),
            "normalized_logprobs": normalized, "token_logprobs": scored.logprobs,
            "prompt_tokens": scored.prompt_tokens, **decision_meta}
    return decision_text, meta
