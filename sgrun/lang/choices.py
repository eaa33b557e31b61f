"""How `select` picks among its choices from their token logprobs (SGLang's `choices_method`s).

A method is called with keyword arguments, per choice: `normalized_prompt_logprobs` (mean token
logprob), `input_token_logprobs` ([logprob, token_id, token_text] per choice token),
`output_token_logprobs` (empty: select generates nothing) and, when the method asks for them,
`unconditional_token_logprobs` (the same tokens scored without the program's text; the first is
None). It returns the decision and the meta information `get_meta_info(name)` shows.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ChoicesDecision:
    decision: str
    meta_info: dict[str, Any] = field(default_factory=dict)


class ChoicesSamplingMethod(ABC):
    @property
    def requires_unconditional_logprobs(self) -> bool:
        return False

    @abstractmethod
    def __call__(self, *, choices: list[str], normalized_prompt_logprobs: list[float],
                 input_token_logprobs: list[list[Any]], output_token_logprobs: list[list[Any]],
                 unconditional_token_logprobs: list[list[Any]] | None = None) -> ChoicesDecision: ...

    def __repr__(self) -> str:
        return type(self).__name__


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=values.__getitem__)


def _base_meta(normalized: list[float], inputs: list[list[Any]], outputs: list[list[Any]]) -> dict[str, Any]:
    return {"normalized_prompt_logprobs": normalized, "input_token_logprobs": inputs,
            "output_token_logprobs": outputs}


class TokenLengthNormalized(ChoicesSamplingMethod):
    """The choice with the highest mean token logprob (the default)."""

    def __call__(self, *, choices, normalized_prompt_logprobs, input_token_logprobs, output_token_logprobs,
                 unconditional_token_logprobs=None) -> ChoicesDecision:
        return ChoicesDecision(choices[_argmax(normalized_prompt_logprobs)],
                               _base_meta(normalized_prompt_logprobs, input_token_logprobs, output_token_logprobs))


class GreedyTokenSelection(ChoicesSamplingMethod):
    """Token by token: keep the choices whose token at this position has the highest logprob,
    until one is left. A choice shorter than the longest is padded with its own mean logprob, so
    a prefix of a longer choice competes on its average instead of dropping out."""

    def __call__(self, *, choices, normalized_prompt_logprobs, input_token_logprobs, output_token_logprobs,
                 unconditional_token_logprobs=None) -> ChoicesDecision:
        width = max(len(tokens) for tokens in input_token_logprobs)
        matrix = []
        for tokens in input_token_logprobs:
            row = [float(t[0]) for t in tokens]
            mean = sum(row) / len(row) if row else -math.inf
            matrix.append(row + [mean] * (width - len(row)))
        remaining = list(range(len(choices)))
        for column in range(width):
            best = max(matrix[i][column] for i in remaining)
            remaining = [i for i in remaining if matrix[i][column] == best]
            if len(remaining) == 1:
                break
        meta = _base_meta(normalized_prompt_logprobs, input_token_logprobs, output_token_logprobs)
        meta["greedy_logprob_matrix"] = matrix
        return ChoicesDecision(choices[remaining[0]], meta)


class UnconditionalLikelihoodNormalized(ChoicesSamplingMethod):
    """The choice whose tokens gain the most logprob from the program's text: the mean of
    (logprob given the text - logprob without it). The unconditional first token counts as 0."""

    @property
    def requires_unconditional_logprobs(self) -> bool:
        return True

    def __call__(self, *, choices, normalized_prompt_logprobs, input_token_logprobs, output_token_logprobs,
                 unconditional_token_logprobs=None) -> ChoicesDecision:
        if unconditional_token_logprobs is None:
            raise ValueError("unconditional_likelihood_normalized needs the unconditional token logprobs")
        gains = []
        for given, alone in zip(input_token_logprobs, unconditional_token_logprobs):
            alone_values = [float(t[0] or 0.0) for t in alone]
            diffs = [float(g[0]) - a for g, a in zip(given, alone_values)]
            gains.append(sum(diffs) / len(diffs) if diffs else -math.inf)
        meta = _base_meta(normalized_prompt_logprobs, input_token_logprobs, output_token_logprobs)
        meta["unconditional_token_logprobs"] = unconditional_token_logprobs
        meta["normalized_unconditional_prompt_logprobs"] = gains
        return ChoicesDecision(choices[_argmax(gains)], meta)


token_length_normalized = TokenLengthNormalized()
greedy_token_selection = GreedyTokenSelection()
unconditional_likelihood_normalized = UnconditionalLikelihoodNormalized()

__all__ = ["ChoicesDecision", "ChoicesSamplingMethod", "TokenLengthNormalized", "GreedyTokenSelection",
           "UnconditionalLikelihoodNormalized", "token_length_normalized", "greedy_token_selection",
           "unconditional_likelihood_normalized"]
