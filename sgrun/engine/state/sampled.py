"""What a step hands the postprocessor for one sequence: `SampledTokens` (a generating
sequence's tokens this step) or `Scores` (a scoring sequence's log-probabilities). The model
runner makes them (model_runner.py), the postprocessor takes them (postprocess.py); neither
imports the other for them."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SampledLogprobs:
    """The model's own log-probabilities of a step's tokens (the rows before any processing, as
    OpenAI reports them): one entry per token."""
    chosen: list[float]
    top: list[list[tuple[int, float]]]          # top alternatives per token, best first
    # log_softmax of the sampling rows, for a constrained request with jump-forward: it may replace
    # a sampled token by a longer one predicted by the same row ([tokens, vocab], the row that
    # predicted each token).
    rows: torch.Tensor | None = None

    def row(self, i: int) -> torch.Tensor | None:
        """The log-softmax row that predicted token i, where kept."""
        return self.rows[i] if self.rows is not None else None


@dataclass
class SampledTokens:
    """Tokens a generating sequence accepts this step (one; several when a speculative step
    verifies a draft). Each optional field is one feature's."""
    tokens: list[int]
    logprobs: SampledLogprobs | None = None     # the request asked for logprobs
    # Jump-forward with logprobs: the model's log-probabilities of the forced tokens it appended
    # last step (the sequence's logprobs_pending_from on), computed by this step's forward:
    # (logprob, top) each.
    forced: list[tuple[float, list[tuple[int, float]]]] | None = None
    # Speculation: how many of the sequence's draft tokens were accepted (the tokens are those plus
    # one drawn token); None for a plain step.
    accepted_draft: int | None = None


@dataclass
class Scores:
    """A scoring sequence's log-probabilities of its tokens at this step's positions; `done`
    once this step computed its last token."""
    logprobs: list[float]
    done: bool = False
