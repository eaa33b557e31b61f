"""The sampling rows of a step, built on the host: the one place that says how a sequence's
logit row is processed before a token is drawn from it.

A sequence with a draft d_0..d_{k-1} (speculative.py) has k + 1 rows; a plain decode is a draft of
length 0 and has one. Row j is processed as a plain step at that position would process it: the
step (counter-RNG noise) is num_output + j, the penalty history is the output plus d_0..d_{j-1},
the constraint mask is the matcher's after d_0..d_{j-1} (trial advances, rolled back), and
min_new_tokens bans EOS and the stop ids while num_output + j is short of it. The device half
(`ModelRunner.run_sampling`) applies these rows; `sampler.draw` then draws.

Pure with respect to the sequences (a matcher's trial advances are rolled back), so the
isolation stage may build these for part of a batch again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.engine.state.sequence import Sequence


@dataclass
class SamplingInputs:
    """Per row: parameters, noise seed and step, penalty histories, constraint masks, bans."""
    seqs: list[Sequence]             # the sequence each row belongs to
    params: list[SamplingParams]
    seeds: list[int]
    steps: list[int]
    prompts: list[list[int]]         # penalty histories, copied (empty for rows without penalties)
    outputs: list[list[int]]
    bitmask: torch.Tensor | None     # [rows, words] int32 (pinned on CUDA), constrained rows filled
    constrained: list[int]
    ignore_eos_rows: list[int]       # rows whose EOS is banned (ignore_eos, or short of min_new_tokens)
    banned: list[tuple[int, int]] = field(default_factory=list)   # (row, stop id) short of min_new_tokens
    drafts: list[int] = field(default_factory=list)   # the draft token each row verifies; -1: a free draw
    first_rows: list[int] = field(default_factory=list)   # per sequence (not row): its first row

    @property
    def has_drafts(self) -> bool:
        return any(d >= 0 for d in self.drafts)


def penalised(p: SamplingParams) -> bool:
    return p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0


def sampling_inputs(seqs: list[Sequence], vocab_size: int, pin: bool = False) -> SamplingInputs:
    """The rows of `seqs` (each its len(draft) + 1 rows, in order), with the constraint bitmask
    filled by the matchers on the CPU (pinned when `pin`, for a non-blocking copy to CUDA)."""
    si = SamplingInputs([], [], [], [], [], [], None, [], [], [], [], [])
    masks: list[tuple[int, Sequence]] = []
    for seq in seqs:
        p = seq.params
        pen = penalised(p)
        base = list(seq.output_ids) if pen else []
        si.first_rows.append(len(si.seqs))
        if seq.constraint.matcher is not None:
            masks.append((len(si.seqs), seq))
        for j in range(len(seq.speculation.draft) + 1):
            r = len(si.seqs)
            si.seqs.append(seq)
            si.params.append(p)
            si.seeds.append(seq.sample_seed)
            si.steps.append(seq.num_output + j)
            si.prompts.append(seq.tokens[:seq.prompt_len] if pen else [])
            si.outputs.append(base + seq.speculation.draft[:j] if pen else [])
            si.drafts.append(seq.speculation.draft[j] if j < len(seq.speculation.draft) else -1)
            # min_new_tokens: nothing may end an unconstrained sequence before it (EOS and stop ids banned).
            early = seq.constraint.matcher is None and seq.num_output + j < p.min_new_tokens
            if (p.ignore_eos and seq.constraint.matcher is None) or early:
                si.ignore_eos_rows.append(r)
            if early:
                si.banned.extend((r, t) for t in p.stop_token_ids)
            if seq.constraint.matcher is not None:
                si.constrained.append(r)
    if masks:
        from sgrun.constrain.bitmask import allocate_bitmask
        bitmask = allocate_bitmask(len(si.seqs), vocab_size)   # all allowed
        if pin:
            bitmask = bitmask.pin_memory()
        for first, seq in masks:
            _fill_masks(seq, bitmask[first:first + len(seq.speculation.draft) + 1])
        si.bitmask = bitmask
    return si


def _fill_masks(seq: Sequence, out: torch.Tensor) -> None:
    """Row j: the constraint's mask after the draft's first j tokens (the matcher is advanced on
    trial and rolled back; the drafter already checked the draft is allowed)."""
    matcher = seq.constraint.matcher
    assert matcher is not None
    advanced = 0
    try:
        for j, token in enumerate(seq.speculation.draft):
            matcher.fill_bitmask(out[j])
            if not matcher.advance(token):
                raise RuntimeError(f"constraint rejected draft token {token}")
            advanced += 1
        matcher.fill_bitmask(out[len(seq.speculation.draft)])
    finally:
        if advanced:
            matcher.rollback(advanced)
