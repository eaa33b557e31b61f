"""Scoring: the request kind that asks for log-probabilities of given tokens instead of
sampling new ones (`Engine.score`, the DSL's `select`).

A ScoringSequence is prefilled like any prompt; the logits at the positions before its scored
tokens are turned into their log-probabilities (model_runner.py), appended to `scores`
(postprocess.py), and it finishes once every token is computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sgrun.engine.state.sequence import Sequence
from sgrun.errors import InvalidRequestError
from sgrun.models.tokenizer import Tokenizer


@dataclass(eq=False)
class ScoringSequence(Sequence):
    score_from: int = 1               # logprobs of tokens[score_from:] are wanted
    scores: list[float] = field(default_factory=list)

    @property
    def cache_match_limit(self) -> int:
        # The logits before the first scored token must be computed, so they cannot be cached.
        return min(len(self.tokens) - 1, self.score_from - 1)

    def logit_positions(self, start: int, end: int) -> list[int]:
        # Scored tokens' predecessors in this chunk; every chunk is post-processed (it may be the last).
        return list(range(max(start, self.score_from - 1), min(end, len(self.tokens) - 1)))


def scored_token_ids(tokenizer: Tokenizer, prompt: str | list[int], prompt_ids: list[int],
                     continuations: list[str | list[int]], max_context: int) -> list[tuple[list[int], int]]:
    """(prompt + continuation ids, index of the first scored token) per continuation. A string
    continuation of a string prompt is tokenised together with it, as the model would read it;
    scoring starts where those ids leave the prompt's (at least at 1: token 0 has no logits)."""
    out = []
    for c in continuations:
        if isinstance(c, str):
            full = tokenizer.encode(prompt + c, add_bos=False) if isinstance(prompt, str) \
                else prompt_ids + tokenizer.encode(c, add_bos=False)
        else:
            full = prompt_ids + list(c)
        start = 0
        while start < min(len(full), len(prompt_ids)) and full[start] == prompt_ids[start]:
            start += 1
        out.append((full, max(1, start)))
    if any(len(full) > max_context for full, _ in out):
        raise InvalidRequestError(f"prompt + continuation exceeds the context of {max_context} tokens",
                                  field="prompt")
    return out
