"""Verifying speculative drafts: the k + 1 logit rows of a verify forward -> accepted tokens.

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

Like `ModelRunner.sample`, this only reads the sequences (the matcher's trial advances are rolled
back), so the isolation stage may retry it on part of a batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from sgrun.engine.counter_rng import uniform
from sgrun.engine.ngram_draft import next_draft_limit
from sgrun.engine.model_runner import Logits, ModelRunner, SampledTokens, SamplingInputs
from sgrun.engine.sampler import _filter
from sgrun.engine.sequence import Sequence

if TYPE_CHECKING:
    from sgrun.engine.scheduler import Scheduler
    from sgrun.engine.stats import SpeculationCounters


def verify_drafts(runner: ModelRunner, items: list[tuple[Sequence, Logits]]) -> list[SampledTokens]:
    """Per (drafted sequence, its k + 1 verify rows): the tokens it accepts this step."""
    seqs = [seq for seq, _ in items]
    rows = torch.cat([lg.rows for _, lg in items]).float()
    for seq, lg in items:
        assert lg.rows.shape[0] == len(seq.draft) + 1, "a verify step needs one row per draft token plus one"
    si = expand_sampling_inputs(runner, seqs)
    raw = rows.clone() if any(s.params.logprobs is not None for s in seqs) else None
    runner.process_rows(si, rows)
    drafts = [d for s in seqs for d in s.draft + [-1]]   # the token each row verifies (-1: bonus row)
    accept, alt = accept_rows(rows, si, drafts)
    out: list[SampledTokens] = []
    start = 0
    for seq in seqs:
        k = len(seq.draft)
        tokens: list[int] = []
        for j in range(k):
            if accept[start + j]:
                tokens.append(seq.draft[j])
            else:
                tokens.append(alt[start + j])
                break
        else:
            tokens.append(alt[start + k])
        got = SampledTokens(tokens, accepted_draft=len(tokens) - 1)
        if raw is not None and seq.params.logprobs is not None:
            _add_logprobs(got, seq, raw[start:start + len(tokens)])
        out.append(got)
        start += k + 1
    return out


def expand_sampling_inputs(runner: ModelRunner, seqs: list[Sequence]) -> SamplingInputs:
    """One sampling row per verify position: row j of a sequence is sampled as if d_0..d_{j-1}
    were already its output (step, penalty history, constraint state, min_new_tokens)."""
    row_seqs: list[Sequence] = []
    steps: list[int] = []
    prompts: list[list[int]] = []
    outputs: list[list[int]] = []
    ignore_eos: list[int] = []
    banned: list[tuple[int, int]] = []
    constrained: list[int] = []
    masks: list[tuple[int, Sequence]] = []
    for seq in seqs:
        p = seq.params
        penalised = p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0
        base = list(seq.output_ids) if penalised else []
        if seq.matcher is not None:
            masks.append((len(row_seqs), seq))
        for j in range(len(seq.draft) + 1):
            r = len(row_seqs)
            row_seqs.append(seq)
            steps.append(seq.num_output + j)
            prompts.append(seq.tokens[:seq.prompt_len] if penalised else [])
            outputs.append(base + seq.draft[:j] if penalised else [])
            early = seq.matcher is None and seq.num_output + j < p.min_new_tokens
            if (p.ignore_eos and seq.matcher is None) or early:
                ignore_eos.append(r)
            if early:
                banned.extend((r, t) for t in p.stop_token_ids)
            if seq.matcher is not None:
                constrained.append(r)
    bitmask = None
    if masks:
        from sgrun.constrain.bitmask import allocate_bitmask
        bitmask = allocate_bitmask(len(row_seqs), runner.model.cfg.vocab_size)
        if runner.device.type == "cuda":
            bitmask = bitmask.pin_memory()
        for first, seq in masks:
            _fill_draft_masks(seq, bitmask[first:first + len(seq.draft) + 1])
    return SamplingInputs(row_seqs, [s.params for s in row_seqs], [s.sample_seed for s in row_seqs], steps,
                          prompts, outputs, bitmask, constrained, ignore_eos, banned)


def _fill_draft_masks(seq: Sequence, out: torch.Tensor) -> None:
    """Row j: the constraint's mask after the draft's first j tokens (the matcher is advanced on
    trial and rolled back; the drafter already checked the draft is allowed)."""
    matcher = seq.matcher
    assert matcher is not None
    advanced = 0
    try:
        for j, token in enumerate(seq.draft):
            matcher.fill_bitmask(out[j])
            if not matcher.advance(token):
                raise RuntimeError(f"constraint rejected draft token {token}")
            advanced += 1
        matcher.fill_bitmask(out[len(seq.draft)])
    finally:
        matcher.rollback(advanced)


def accept_rows(rows: torch.Tensor, si: SamplingInputs, drafts: list[int]) -> tuple[list[bool], list[int]]:
    """rows: processed logits [R, V] (bias, penalties, masks applied). Per row: whether its draft
    token is accepted, and the token emitted there instead (on rejection, or the bonus row)."""
    dev = rows.device
    target = rows.argmax(dim=-1)   # greedy rows: accept while the draft is the argmax
    draft_t = torch.tensor(drafts, dtype=torch.long).to(dev)
    accept = target == draft_t
    alt = target
    sampled = [r for r, p in enumerate(si.params) if not p.greedy]
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
        accept_s = has_draft & (coin < p_x)
        # The residual: p without the draft token, renormalised (Gumbel-max ignores the scale).
        residual = filtered.scatter(1, col, torch.where(has_draft[:, None], float("-inf"), filtered.gather(1, col)))
        drawn = (residual - torch.log(-torch.log(u))).argmax(dim=-1)
        accept = accept.clone()
        accept[idx] = accept_s
        alt = target.clone()
        alt[idx] = drawn
    return accept.tolist(), alt.tolist()


def _add_logprobs(got: SampledTokens, seq: Sequence, raw: torch.Tensor) -> None:
    """The model's own log-probabilities (before any processing, as OpenAI reports them) of each
    accepted token, from the row that predicted it, with the top alternatives."""
    k = seq.params.logprobs or 0
    lp = torch.log_softmax(raw, dim=-1)
    chosen = lp.gather(1, torch.tensor(got.tokens, dtype=torch.long).to(lp.device)[:, None])[:, 0].tolist()
    got.logprobs = chosen
    if k > 0:
        vals, ids = lp.topk(k, dim=-1)
        got.top = [list(zip(i, v)) for i, v in zip(ids.tolist(), vals.tolist())]
    else:
        got.top = [[] for _ in got.tokens]
    if seq.matcher is not None and seq.params.jump_forward:
        got.row_logprobs = lp   # one row per token: jump-forward may replace any of them


def settle_drafts(sampled: list[tuple[Sequence, Any]], scheduler: "Scheduler", counters: "SpeculationCounters",
                  num_draft: int) -> None:
    """After sampling, before postprocess: each verified sequence forgets its rejected draft
    positions (their K/V and the pages only they used), the acceptance is counted, and its next
    draft length adapts to it (ngram_draft.next_draft_limit)."""
    for seq, out in sampled:
        if seq.draft and isinstance(out, SampledTokens) and out.accepted_draft is not None:
            counters.record(len(seq.draft), out.accepted_draft)
            seq.draft_limit = next_draft_limit(seq.draft_limit, len(seq.draft), out.accepted_draft, num_draft)
            scheduler.settle_draft(seq, out.accepted_draft)
