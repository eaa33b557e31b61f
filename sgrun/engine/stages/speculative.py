"""Speculative decoding's drafts and their acceptance: speculation proposes and accepts, the
sampler draws (sampler.py: `draw`, with the acceptance rule for draft rows).

Who does what: `Speculation.draft_for(seq, budget)` is the scheduler's draft hook (the one place a
draft is made, so a check of drafts against the request's constraint belongs there);
sampling_rows.py builds the k + 1 rows of a sequence with a k-token draft (a plain decode is a
draft of length 0, one row); `sampler.draw` draws on the device (the plain draw for free rows,
the acceptance rule for draft rows); `tokens_of` turns the drawn rows into each sequence's
accepted tokens on the host; `Speculation.settle` counts the acceptance and adapts the next draft
length, and the step hands the accepted count to `Scheduler.settle`, which keeps only those
draft positions. Overlap scheduling runs no drafts (step.py says why).
"""

from __future__ import annotations

from sgrun.engine.parts.ngram_draft import NgramDrafter, SpeculativeConfig, next_draft_limit
from sgrun.engine.parts.sampling_rows import SamplingInputs
from sgrun.engine.state.sequence import Sequence
from sgrun.engine.stages.stats import SpeculationCounters


class Speculation:
    """N-gram speculation for one engine: the draft hook, and the acceptance bookkeeping."""

    def __init__(self, config: SpeculativeConfig, max_context: int, enabled: bool = True):
        self.config = config
        self.drafter = NgramDrafter(config, max_context)
        self.counters = SpeculationCounters(enabled=enabled)

    def draft_for(self, seq: Sequence, budget: int) -> list[int]:
        """The draft this step's verify forward computes after `seq`'s last token ([] for none).
        `budget`: batch tokens left after the sequence's own one."""
        return self.drafter.draft(seq, budget) if self.counters.enabled else []

    def settle(self, seq: Sequence, accepted: int) -> None:
        """After a verify step that accepted `accepted` of `seq`'s draft tokens: count them and
        adapt the next draft's length (the scheduler forgets the rejected positions)."""
        self.counters.record(len(seq.speculation.draft), accepted)
        state = seq.speculation
        state.limit = next_draft_limit(state.limit, len(state.draft), accepted, self.config.num_draft)


def tokens_of(seqs: list[Sequence], si: SamplingInputs, drawn: list[list[int]]) -> list[tuple[list[int], int | None]]:
    """Per sequence: the tokens it accepts this step (the accepted draft prefix, then the token
    drawn at the first rejected row or the bonus row), and how many draft tokens that is (None
    for a sequence without a draft). `drawn`: sampler.draw's result on the host."""
    alt, accepted = drawn
    out: list[tuple[list[int], int | None]] = []
    for seq, first in zip(seqs, si.first_rows):
        k = len(seq.speculation.draft)
        tokens: list[int] = []
        for j in range(k):
            if not accepted[first + j]:
                break
            tokens.append(seq.speculation.draft[j])
        tokens.append(alt[first + len(tokens)])
        out.append((tokens, len(tokens) - 1 if k else None))
    return out
