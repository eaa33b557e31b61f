"""N-gram drafting for speculative decoding (prompt lookup, vLLM's `ngram` method).

A request's own tokens (prompt + output so far) are the draft model: the last n tokens are
looked up among the earlier tokens (n from `ngram_max` down to `ngram_min`, longest first), and
the tokens that followed the most recent earlier occurrence are proposed as the next `num_draft`
tokens. Agent outputs copy a lot from their context (tool results quoted back, JSON keys, code
being edited), so such lookups are often right, and a wrong draft costs only the extra query
rows of one forward (speculative.py verifies it).

The scheduler asks `Speculation.draft_for(seq, budget)` (speculative.py), which asks
`NgramDrafter.draft`, for every decoding sequence each step; the draft is what the verify forward
computes after the sequence's last token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgrun.engine.state.sequence import Sequence
from sgrun.errors import InvalidRequestError

MAX_DRAFT_TOKENS = 16
MAX_NGRAM = 16
# How far back the lookup searches (tokens): bounds the per-step cost on long contexts.
LOOKUP_WINDOW = 8192


@dataclass(frozen=True)
class SpeculativeConfig:
    """Engine-wide n-gram speculation settings. `enabled` is the default for requests that do
    not say (`SamplingParams.speculative_ngram` None)."""
    enabled: bool = False
    # Defaults measured on bench_speculative.py (its table is in git history of docs/benchmarks.md): k=6, n=2..3 beat k=4, n=1..3
    # (a one-token match is right too rarely to pay for its rows on a CPU).
    num_draft: int = 6          # draft tokens proposed per step (k); the verify forward runs k + 1 rows
    ngram_max: int = 3          # longest suffix looked up
    ngram_min: int = 2          # shortest suffix looked up

    def validated(self) -> "SpeculativeConfig":
        if not isinstance(self.enabled, bool):
            raise InvalidRequestError("speculative_ngram must be true or false", field="speculative_ngram")
        for name, high in (("num_draft", MAX_DRAFT_TOKENS), ("ngram_max", MAX_NGRAM), ("ngram_min", MAX_NGRAM)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise InvalidRequestError(f"speculative_{name} must be an integer in [1, {high}], got {value!r}",
                                          field=f"speculative_{name}")
        if self.ngram_min > self.ngram_max:
            raise InvalidRequestError(f"speculative_ngram_min ({self.ngram_min}) must not exceed "
                                      f"speculative_ngram_max ({self.ngram_max})", field="speculative_ngram_min")
        return self


def propose(tokens: list[int] | np.ndarray, num_draft: int, ngram_max: int, ngram_min: int) -> list[int]:
    """The tokens that followed the most recent earlier occurrence of the longest suffix of
    `tokens` (length ngram_max down to ngram_min) that occurs earlier; [] when none does."""
    arr = np.asarray(tokens[-LOOKUP_WINDOW:], dtype=np.int64)
    total = arr.shape[0]
    for n in range(min(ngram_max, total - 1), ngram_min - 1, -1):
        # Candidate starts i in [0, total - n - 1]: the occurrence ends before the suffix's last token,
        # so at least one token follows it.
        span = total - n
        hit = arr[:span] == arr[total - n]
        for j in range(1, n):
            hit &= arr[j:span + j] == arr[total - n + j]
        found = np.flatnonzero(hit)
        if found.size:
            start = int(found[-1]) + n
            return arr[start:start + num_draft].tolist()
    return []


class NgramDrafter:
    """Proposes each decoding sequence's draft for this step (the scheduler's draft hook)."""

    def __init__(self, config: SpeculativeConfig, max_context: int):
        self.config = config
        self.max_context = max_context

    def wants(self, seq: Sequence) -> bool:
        """Does this sequence speculate this step? Only plain decodes (one known token to compute,
        nothing pending on the device, no forced tokens waiting for their logprobs)."""
        on = seq.params.speculative_ngram
        if not (self.config.enabled if on is None else on):
            return False
        if seq.detok is None or seq.pending or seq.constraint.logprobs_pending_from is not None:
            return False   # scoring sequences have no detokenizer; overlap leaves tokens pending
        return seq.constraint.finish_after_logprobs is None and len(seq.tokens) - seq.num_computed == 1

    def draft(self, seq: Sequence, budget: int) -> list[int]:
        """At most `budget` tokens, and never past max_new_tokens or the context (the verify
        step also yields one token of its own). A constrained sequence's draft ends at the first
        token its constraint forbids there (a trial advance of its matcher, rolled back)."""
        if not self.wants(seq):
            return []
        cfg = self.config
        limit = cfg.num_draft if seq.speculation.limit is None else seq.speculation.limit
        room = min(budget, seq.params.max_new_tokens - seq.num_output - 1,
                   self.max_context - len(seq.tokens) - 1, limit)
        if room <= 0:
            return []
        draft = propose(seq.tokens, room, cfg.ngram_max, cfg.ngram_min)
        if draft and seq.constraint.matcher is not None:
            draft = allowed_prefix(seq, draft)
        return draft


def next_draft_limit(limit: int | None, drafted: int, accepted: int, num_draft: int) -> int:
    """The draft length for a sequence's next step, from how its last draft fared: a fully
    accepted draft doubles the limit (up to num_draft; a draft cut short by a short continuation
    does not shrink it: a copied span is back to full drafts in a few steps), a rejection
    shrinks it to the run that was accepted plus one (at least 1). A request whose text does not copy its context then verifies
    one draft token per step (nearly the cost of a plain decode) instead of k, while one that
    copies long spans keeps long drafts."""
    if accepted >= drafted:
        return min(num_draft, 2 * (num_draft if limit is None else limit))
    return max(1, accepted + 1)


def allowed_prefix(seq: Sequence, draft: list[int]) -> list[int]:
    """The longest prefix of `draft` the constraint accepts token by token from its current
    state, stopping after a token that terminates it (nothing but EOS may follow) or after which
    it forces text (jump-forward appends that text there, so later draft tokens would be dropped)."""
    matcher = seq.constraint.matcher
    assert matcher is not None
    kept = 0
    jump = seq.params.jump_forward
    for token in draft:
        if not matcher.advance(token):
            break
        kept += 1
        if matcher.is_terminated() or (jump and matcher.forced_text()):
            break
    matcher.rollback(kept)
    return draft[:kept]
