"""Sequence: the engine's state for one sample of one request (a generating request; the
scoring kind is ScoringSequence in scoring.py). Its tokens and KV bookkeeping are its own fields;
what belongs to the request's constraint, to speculation and to the output the caller gets are
objects of their own (ConstraintState, DraftState, OutputState)."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

import torch

from sgrun.engine.state.detokenizer import IncrementalDetokenizer
from sgrun.engine.state.outputs import StreamEvent, TokenLogprob
from sgrun.engine.state.sampling_params import SamplingParams

if TYPE_CHECKING:
    from sgrun.engine.state.radix_cache import RadixNode


class TokenMatcher(Protocol):
    """Per-request constraint state, as the engine uses it (sgrun.constrain.Matcher is one)."""
    def fill_bitmask(self, out_row: torch.Tensor) -> None: ...
    def advance(self, token_id: int) -> bool: ...
    def is_terminated(self) -> bool: ...
    def forced_text(self) -> str: ...
    def rollback(self, num_tokens: int) -> None: ...


class CompiledConstraint(Protocol):
    """What `Engine.submit(constraint=...)` takes (sgrun.constrain.Constraint is one)."""
    def matcher(self) -> TokenMatcher: ...


class Status(enum.Enum):
    WAITING = 0
    RUNNING = 1
    FINISHED = 2


@dataclass
class ConstraintState:
    """The request's constraint on one sample: its matcher, and the tokens jump-forward forced
    whose log-probabilities wait for the next forward."""
    matcher: TokenMatcher | None = None    # constraint matcher (sgrun.constrain), or None
    # Jump-forward appends forced tokens without running the model; with logprobs asked for, the
    # next forward (which computes them anyway) also yields their log-probabilities. Tokens from
    # this position on wait for theirs; a sequence that finished meanwhile waits for that forward.
    logprobs_pending_from: int | None = None
    finish_after_logprobs: str | None = None


@dataclass
class DraftState:
    """Speculation's state of one sample (ngram_draft.py, speculative.py)."""
    # Draft tokens this step's verify forward computes after `tokens`; never part of `tokens`: the
    # sampler accepts a prefix of them (sampler.draw, speculative.tokens_of), the rest is dropped.
    draft: list[int] = field(default_factory=list)
    limit: int | None = None          # most draft tokens next step (adapted to acceptance; None: the config's)


@dataclass
class OutputState:
    """What one sample has produced for its caller besides its tokens: how it ended, its
    logprobs, when its first token came."""
    finish_reason: str | None = None
    matched_stop: str | int | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)
    first_token_time: float | None = None
    error: str | None = None
    abort_cause: str | None = None    # "client_disconnect" | "error" | "engine" when aborted


@dataclass(eq=False)
class Sequence:
    seq_id: int
    request_id: str
    index: int
    tokens: list[int]                 # prompt followed by output tokens
    prompt_len: int
    params: SamplingParams
    detok: IncrementalDetokenizer | None
    emit: Callable[[StreamEvent], None]
    sample_seed: int = 0              # counter-based sampling: noise = hash(sample_seed, num_output)
    pending: int = 0                  # sampled tokens still on the device (overlap scheduling)
    constraint: ConstraintState = field(default_factory=ConstraintState)
    speculation: DraftState = field(default_factory=DraftState)
    output: OutputState = field(default_factory=OutputState)
    # The KV pages and the scheduler's bookkeeping:
    status: Status = Status.WAITING
    page_table: list[int] = field(default_factory=list)
    num_computed: int = 0             # tokens whose K/V are in the pool
    # First position whose K/V jump-forward made stale (retokenize_tail) in the step being settled:
    # a verify step's K/V of draft tokens the retokenised tail replaced or dropped is recorded by
    # the scheduler after post-processing, which must not count it (drop_stale_kv).
    kv_stale_from: int | None = None
    cached_tokens: int = 0            # prompt tokens served from the radix cache at first admission
    admitted: bool = False
    locked_node: RadixNode | None = None
    cache_inserted_len: int = 0
    admit_order: int = 0
    passed_over: int = 0
    num_preemptions: int = 0
    arrival_time: float = field(default_factory=time.monotonic)

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.prompt_len:]

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def num_tokens(self) -> int:
        """Tokens including those sampled but not yet read back and this step's draft (the
        scheduler plans with these)."""
        return len(self.tokens) + self.pending + len(self.speculation.draft)

    def token_slice(self, start: int, end: int) -> list[int]:
        """The known input tokens at positions [start, end), draft tokens included."""
        if self.speculation.draft and end > len(self.tokens):
            return (self.tokens + self.speculation.draft)[start:end]
        return self.tokens[start:end]

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    @property
    def cache_match_limit(self) -> int:
        """How much of `tokens` may come from the prefix cache: all but the last token, whose
        logits give the next one."""
        return len(self.tokens) - 1

    def logit_positions(self, start: int, end: int) -> list[int] | None:
        """Positions in [start, end) (this step's chunk) whose next-token logits are wanted, or
        None when this step produces nothing to post-process (a prefill chunk short of the end)."""
        if end != self.num_tokens:
            return None
        if self.speculation.draft:   # the last token's row and each draft token's: the verify rows
            return list(range(end - 1 - len(self.speculation.draft), end))
        if self.constraint.logprobs_pending_from is not None:  # the rows that predict the forced tokens, too
            return list(range(max(start, self.constraint.logprobs_pending_from - 1), end))
        return [end - 1]

    def retokenize_tail(self, rollback: int, tokens: list[int]) -> None:
        """Replace the last `rollback` tokens by `tokens` (jump-forward). K/V computed for the
        replaced tokens is stale, so they are recomputed: from here, and again when the step is
        settled (a verify step's draft positions are recorded as computed after this runs)."""
        del self.tokens[len(self.tokens) - rollback:]
        self.tokens.extend(tokens)
        first_new = len(self.tokens) - len(tokens)
        self.num_computed = min(self.num_computed, first_new)
        self.kv_stale_from = first_new if self.kv_stale_from is None else min(self.kv_stale_from, first_new)

    def drop_stale_kv(self) -> None:
        """Once the step's K/V is recorded: none from kv_stale_from on counts as computed. Why: a
        verify step computed K/V for its draft tokens, and jump-forward after an accepted one
        replaced it (rollback) or dropped the drafts after it for forced text, at positions the
        step then recorded; the next forward read the old tokens' K/V for the new ones."""
        if self.kv_stale_from is not None:
            self.num_computed = min(self.num_computed, self.kv_stale_from)
            self.kv_stale_from = None
