"""A request's way in, on the caller's thread: the checks `Engine.submit` makes before anything
reaches the loop (parameters, context length), and the samples it becomes: one Sequence per
sample, with its detokenizer, its constraint matcher (budgeted to max_new_tokens) and its noise
seed, gathered under one RequestHandle. Scoring requests get their ScoringSequence here too."""

from __future__ import annotations

import itertools
import os
import uuid
from typing import Callable

from sgrun.engine.state.detokenizer import IncrementalDetokenizer
from sgrun.engine.state.prompt_ids import prompt_token_ids
from sgrun.engine.state.request_handle import RequestHandle
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.engine.state.scoring import ScoringSequence
from sgrun.engine.state.sequence import CompiledConstraint, ConstraintState, Sequence, TokenMatcher
from sgrun.errors import InvalidRequestError
from sgrun.models.tokenizer import Tokenizer


def check_fits(prompt_ids: list[int], params: SamplingParams, max_context: int) -> None:
    """The prompt and the tokens asked for fit the context, or a 4xx names which to change."""
    if len(prompt_ids) + params.max_new_tokens > max_context:
        raise InvalidRequestError(
            f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({params.max_new_tokens}) exceeds the "
            f"context of {max_context} tokens: shorten the prompt or lower max_new_tokens",
            field="max_new_tokens" if len(prompt_ids) < max_context else "prompt")


def sample_seed(params: SamplingParams, index: int) -> int:
    """Sample `index`'s counter-RNG seed (counter_rng.py: noise = hash(seed, step)): the request's
    seed for that sample, else a fresh random one; 0 for greedy samples, which draw no noise."""
    if params.greedy:
        return 0
    seed = params.sample_seed(index)
    return (seed if seed is not None else int.from_bytes(os.urandom(8), "little")) & ((1 << 63) - 1)


class Intake:
    """Checks one engine's requests and makes their Sequences (their ids come from one counter)."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, max_context: int, abort: Callable[[str], None]):
        self.tokenizer, self.vocab_size, self.max_context = tokenizer, vocab_size, max_context
        self.abort = abort
        self._seq_ids = itertools.count()

    def prompt_ids(self, prompt: str | list[int]) -> list[int]:
        return prompt_token_ids(self.tokenizer, prompt, self.vocab_size, self.max_context)

    def checked(self, prompt: str | list[int], params: SamplingParams | dict | None) -> tuple[list[int], SamplingParams]:
        """The prompt's ids and the parameters (a dict is read as SamplingParams), both checked."""
        params = params or SamplingParams()
        if isinstance(params, dict):
            params = SamplingParams.from_dict(params)
        params.validated(self.vocab_size)
        prompt_ids = self.prompt_ids(prompt)
        check_fits(prompt_ids, params, self.max_context)
        return prompt_ids, params

    def request(self, prompt_ids: list[int], params: SamplingParams, request_id: str | None,
                constraint: CompiledConstraint | None) -> RequestHandle:
        """The handle of a generating request, with its `params.n` samples."""
        new_matcher: Callable[[], TokenMatcher] | None = None
        if constraint is not None:
            # Masks that close the output within max_new_tokens where it fits; where it cannot, the
            # output is cut at max_new_tokens (finish "length"), or refused under strict_budget.
            from sgrun.constrain.budget import budgeted_matcher
            new_matcher = budgeted_matcher(constraint, params.max_new_tokens, refuse=params.strict_budget)
        handle = RequestHandle(self.abort, request_id or uuid.uuid4().hex, prompt_ids, params.n)
        for i in range(params.n):
            detok = IncrementalDetokenizer(self.tokenizer, prompt_ids, params.skip_special_tokens, params.stop)
            handle.seqs.append(Sequence(seq_id=next(self._seq_ids), request_id=handle.request_id, index=i,
                                        tokens=list(prompt_ids), prompt_len=len(prompt_ids), params=params,
                                        detok=detok, emit=handle.push,
                                        constraint=ConstraintState(new_matcher() if new_matcher is not None else None),
                                        sample_seed=sample_seed(params, i)))
        return handle

    def scoring(self, ids: list[int], score_from: int) -> RequestHandle:
        """The handle of a scoring request: the log-probabilities of ids[score_from:]."""
        handle = RequestHandle(self.abort, uuid.uuid4().hex, ids, 1)
        handle.seqs.append(ScoringSequence(seq_id=next(self._seq_ids), request_id=handle.request_id, index=0,
                                           tokens=list(ids), prompt_len=len(ids),
                                           params=SamplingParams(max_new_tokens=1), detok=None, emit=handle.push,
                                           score_from=score_from))
        return handle
