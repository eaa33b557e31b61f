"""Speculative decoding's drafts and their verification: the k + 1 logit rows of a verify
forward -> accepted tokens.

A sequence with draft d_0..d_{k-1} (ngram_draft.py) ran its last token and its draft through one
forward; row j holds the next-token logits after d_0..d_{j-1}. Each row is processed exactly as a
plain step at that position would process it (logit bias, penalties over the output *with* the
draft prefix, the constraint mask of the matcher advanced over that prefix, min_new_tokens bans,
then temperature / top-k / top-p / min-p), giving the target distribution p_j. Then:

- greedy: d_j is accepted while it is p_j's argmax; the first mismatch is replaced by the argmax
  (so the output is the plain greedy output token for token);
- sampled: the draft is deterministic (q = one-hot), so speculative sampling accepts d_j with
  probability min(1, p_j(d_j) / q(d_j)) = p_j(d_j); on rejection it samples from p_j with d_j
  removed and renormalised (the residual max(0, p - q), normalised). Each emitted token is then
  distributed exactly as p_j. With every draft token accepted, row k gives a bonus token, drawn
  as a plain step draws it.

The randomness is the counter RNG's (counter_rng.py): row j uses the uniforms of (seed, step =
num_output + j); column d_j is the acceptance coin, the other columns the Gumbel noise of the
residual draw (independent of the coin, since every column is its own hash). A seeded request
therefore draws the same tokens on every run, whatever shares its batch.

Who does what: `Speculation.draft_for(seq, budget)` is the scheduler's draft hook (the one place a
draft is made, so a check of drafts against the request's constraint belongs there);
sampling_rows.py builds the k + 1 rows (a plain decode is a draft of length 0, one row);
`choose_tokens` draws on the device (the plain draw for free rows, the acceptance rule above for
draft rows); `tokens_of` turns the drawn rows into each sequence's accepted tokens on the host;
`Speculation.settle` counts the acceptance and adapts the next draft length, and the step hands
the accepted count to `Scheduler.settle`, which keeps only those draft positions. Overlap
scheduling runs no drafts (step.py says why).
"""

from __future__ import annotations

import torch

from sgrun.engine.counter_rng import uniform
from sgrun.engine.ngram_draft import NgramDrafter, SpeculativeConfig, next_draft_limit
from sgrun.engine.sampler import _filter, row_argmax, sample_tokens
from sgrun.engine.sampling_rows import SamplingInputs
from sgrun.engine.sequence import Sequence
from sgrun.engine.stats import SpeculationCounters


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
        self.counters.record(len(seq.draft), accepted)
        seq.draft_limit = next_draft_limit(seq.draft_limit, len(seq.draft), accepted, self.config.num_draft)


def choose_tokens(rows: torch.Tensor, si: SamplingInputs) -> torch.Tensor:
    """rows: processed logits [R, V] (bias, penalties, masks applied). Returns [2, R] int64 on the
    device: per row, the token emitted there if the walk reaches it and does not accept its
    draft (the plain draw for a free row), and whether its draft token is accepted (0/1)."""
    free = sample_tokens(rows, si.params, si.seeds, si.steps)
    if not si.has_drafts:
        return torch.stack([free, torch.zeros_like(free)])
    accept, alt = accept_rows(rows, si, si.drafts, free)
    return torch.stack([alt, accept.long()])


def accept_rows(rows: torch.Tensor, si: SamplingInputs, drafts: list[int],
                free: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: whether its draft token is accepted (bool [R]), and the token emitted there
    instead (on rejection, or the bonus row) ([R]). `free`: the rows' plain draws, if known."""
    dev = rows.device
    draft_t = torch.tensor(drafts, dtype=torch.long).to(dev)
    target = row_argmax(rows) if free is None else free   # greedy rows: accept while the draft is the argmax
    accept = target == draft_t
    alt = target
    sampled = [r for r, (p, d) in enumerate(zip(si.params, drafts)) if not p.greedy and (d >= 0 or free is None)]
    if sampled:
        idx = torch.tensor(sampled, dtype=torch.long).to(dev)
        filtered = _filter(rows[idx], [si.params[r] for r in sampled])
        seeds = torch.tensor([si.seeds[r] for r in sampled], dtype=torch.int64).to(dev)
        steps = torch.tensor([si.steps[r] for r in sampled], dtype=torch.int64).to(dev)
        u = uniform(seeds, steps, rows.shape[1])
        x = draft_t[idx]
        has_draft = x >= 0
        col = x.clamp(min=0)[:, None]
        p_x = torch.softmax(filtered, dim=-1).gather(1, col)[:, 0]
        coin = u.gather(1, col)[:, 0]
        # The residual: p without the draft token, renormalised (Gumbel-max ignores the scale).
        residual = filtered.scatter(1, col, torch.where(has_draft[:, None], float("-inf"), filtered.gather(1, col)))
        drawn = row_argmax(residual - torch.log(-torch.log(u)))
        accept = accept.clone()
        accept[idx] = has_draft & (coin < p_x)
        alt = target.clone()
        alt[idx] = drawn
    return accept, alt


def tokens_of(seqs: list[Sequence], si: SamplingInputs, drawn: list[list[int]]) -> list[tuple[list[int], int | None]]:
    """Per sequence: the tokens it accepts this step (the accepted draft prefix, then the token
    drawn at the first rejected row or the bonus row), and how many draft tokens that is (None
    for a sequence without a draft). `drawn`: choose_tokens' result on the host."""
    alt, accepted = drawn
    out: list[tuple[list[int], int | None]] = []
    for seq, first in zip(seqs, si.first_rows):
        k = len(seq.draft)
        tokens: list[int] = []
        for j in range(k):
            if not accepted[first + j]:
                break
            tokens.append(seq.draft[j])
        tokens.append(alt[first + len(tokens)])
        out.append((tokens, len(tokens) - 1 if k else None))
    return out
