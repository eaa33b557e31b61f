"""Vectorised sampling over a batch of logit rows, on the logits' device: every token the engine
emits is drawn here (`draw`), a plain step's and a speculative verify step's alike.

Order: logit_bias, penalties, constraint mask -> temperature, top-k, top-p, min-p -> greedy
argmax, or Gumbel-max with counter-based noise (counter_rng.py): row r's noise is a hash of
(its request's seed, its step), so a seeded request samples the same tokens whatever else
shares the batch, on any device, with one set of tensor ops for the whole batch.

Draft rows (speculative decoding): a sequence with draft d_0..d_{k-1} (ngram_draft.py,
speculative.py) ran its last token and its draft through one forward; row j holds the next-token
logits after d_0..d_{j-1}, processed exactly as a plain step at that position would process it
(sampling_rows.py), giving the target distribution p_j. Then (`accept_drafts`):

- greedy: d_j is accepted while it is p_j's argmax; the first mismatch is replaced by the argmax
  (so the output is the plain greedy output token for token);
- sampled: the draft is deterministic (q = one-hot), so speculative sampling accepts d_j with
  probability min(1, p_j(d_j) / q(d_j)) = p_j(d_j); on rejection it samples from p_j with d_j
  removed and renormalised (the residual max(0, p - q), normalised). Each emitted token is then
  distributed exactly as p_j. With every draft token accepted, row k gives a bonus token, drawn
  as a plain step draws it.

Row j uses the uniforms of (seed, step = num_output + j); column d_j is the acceptance coin, the
other columns the Gumbel noise of the residual draw (independent of the coin, since every column
is its own hash). A seeded request therefore draws the same tokens on every run, whatever shares
its batch.

Every per-row parameter becomes one small tensor built on the host and copied once; nothing in
here reads a device value back except the final token ids (and logprobs when asked for).
"""

from __future__ import annotations

from typing import Callable

import torch

from sgrun.engine.state.counter_rng import gumbel, uniform
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.engine.parts.sampling_rows import SamplingInputs


def _column(values: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[len(values), 1] on device: one per-row parameter (one host-to-device copy)."""
    return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)[:, None]


def _pad(rows: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max((len(r) for r in rows), default=0) or 1
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        if r:
            ids[i, : len(r)] = torch.tensor(r)
            valid[i, : len(r)] = True
    return ids.to(device, non_blocking=True), valid.to(device, non_blocking=True)


def apply_penalties(logits: torch.Tensor, params: list[SamplingParams], prompts: list[list[int]],
                    outputs: list[list[int]]) -> None:
    """In place. Repetition penalty (transformers semantics) over prompt + output; frequency and
    presence penalties (OpenAI semantics) over the output only."""
    dev = logits.device
    rows = [i for i, p in enumerate(params) if p.frequency_penalty or p.presence_penalty]
    if rows:
        ids, valid = _pad([outputs[i] for i in rows], dev)
        counts = torch.zeros(len(rows), logits.shape[1], device=dev)
        counts.scatter_add_(1, ids, valid.float())
        freq = _column([params[i].frequency_penalty for i in rows], torch.float32, dev)
        pres = _column([params[i].presence_penalty for i in rows], torch.float32, dev)
        idx = torch.tensor(rows).to(dev)
        logits[idx] -= freq * counts + pres * (counts > 0).float()
    rows = [i for i, p in enumerate(params) if p.repetition_penalty != 1.0]
    if rows:
        ids, valid = _pad([prompts[i] + outputs[i] for i in rows], dev)
        idx = torch.tensor(rows).to(dev)
        sub = logits[idx]
        seen = torch.zeros_like(sub, dtype=torch.bool).scatter_(1, ids, valid)
        pen = _column([params[i].repetition_penalty for i in rows], torch.float32, dev)
        sub = torch.where(seen, torch.where(sub > 0, sub / pen, sub * pen), sub)
        logits[idx] = sub


def apply_logit_bias(logits: torch.Tensor, params: list[SamplingParams]) -> None:
    r, c, v = [], [], []
    for i, p in enumerate(params):
        for tok, bias in p.logit_bias.items():
            if 0 <= tok < logits.shape[1]:
                r.append(i)
                c.append(tok)
                v.append(bias)
    if r:
        dev = logits.device
        logits.index_put_((torch.tensor(r).to(dev), torch.tensor(c).to(dev)),
                          torch.tensor(v, dtype=logits.dtype).to(dev), accumulate=True)


def filter_rows(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Temperature, top-k, top-p and min-p on sampled rows; masked entries become -inf."""
    dev = logits.device
    logits = logits / _column([p.temperature for p in params], torch.float32, dev)
    top_k = [p.top_k for p in params]
    top_p = [p.top_p for p in params]
    min_p = [p.min_p for p in params]
    if any(k > 0 for k in top_k) or any(p < 1.0 for p in top_p):
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        V = logits.shape[1]
        ks = _column([k if k > 0 else V for k in top_k], torch.long, dev)
        drop = torch.arange(V, device=dev)[None, :] >= ks
        probs = sorted_logits.softmax(dim=-1)
        cum = probs.cumsum(dim=-1) - probs  # mass strictly before each entry
        drop |= cum > _column(top_p, torch.float32, dev)
        drop[:, 0] = False
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.empty_like(logits).scatter_(1, order, sorted_logits)
    if any(m > 0 for m in min_p):
        probs = logits.softmax(dim=-1)
        thresh = probs.max(dim=-1, keepdim=True).values * _column(min_p, torch.float32, dev)
        logits = logits.masked_fill(probs < thresh, float("-inf"))
    return logits


# In place: rows' logits that their bitmask forbids become -inf (logits [R, V], bitmask, rows).
MaskKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


def constraint_mask_kernel(attention_backend: str | None) -> MaskKernel:
    """The constraint-mask kernel: Triton's where the Triton attention runs (the device runs
    Triton kernels there anyway), else sgrun.constrain's torch version."""
    if attention_backend == "triton":
        import sgrun.kernels.triton

        def triton_mask(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor) -> None:
            sgrun.kernels.triton.apply_bitmask(logits, bitmask, rows)   # looked up per call (tests spy on it)
        return triton_mask
    from sgrun.constrain import apply_bitmask
    return apply_bitmask


def row_argmax(rows: torch.Tensor) -> torch.Tensor:
    """rows.argmax(dim=-1) for [R, V] logits: on the CPU through numpy, whose vectorized argmax took
    5.5 us for one 49,152-token row where torch's took 55 (AMD EPYC Zen 3, 3 December 2026), and ~0.07 ms
    of a ~10 ms batch-1 step in the engine. Same answer: the first maximum (a NaN counting as
    the maximum), as int64."""
    if rows.device.type == "cpu" and rows.dtype == torch.float32 and rows.dim() == 2 and not rows.requires_grad:
        return torch.from_numpy(rows.numpy().argmax(axis=-1).astype("int64", copy=False))
    return rows.argmax(dim=-1)


def sample_tokens(logits: torch.Tensor, params: list[SamplingParams], seeds: list[int],
                  steps: list[int]) -> torch.Tensor:
    """logits [B, V] float32 (biased, penalised, masked) -> token ids [B] (int64, on the logits'
    device, not synchronised). Row b's randomness is a function of (seeds[b], steps[b]) alone."""
    dev = logits.device
    tokens = row_argmax(logits)
    sampled = [i for i, p in enumerate(params) if not p.greedy]
    if not sampled:
        return tokens
    if len(sampled) == len(params):
        rows, sub_params = logits, params
    else:
        rows, sub_params = logits[torch.tensor(sampled).to(dev)], [params[i] for i in sampled]
    seed_t = torch.tensor([seeds[i] for i in sampled], dtype=torch.int64).to(dev, non_blocking=True)
    step_t = torch.tensor([steps[i] for i in sampled], dtype=torch.int64).to(dev, non_blocking=True)
    drawn = row_argmax(filter_rows(rows, sub_params) + gumbel(seed_t, step_t, logits.shape[1]))
    if len(sampled) == len(params):
        return drawn
    tokens[torch.tensor(sampled).to(dev)] = drawn
    return tokens


def draw(rows: torch.Tensor, si: SamplingInputs) -> torch.Tensor:
    """rows: processed logits [R, V] (bias, penalties, masks applied). Returns [2, R] int64 on the
    device: per row, the token emitted there if the walk reaches it and does not accept its
    draft (the plain draw for a free row), and whether its draft token is accepted (0/1)."""
    free = sample_tokens(rows, si.params, si.seeds, si.steps)
    if not si.has_drafts:
        return torch.stack([free, torch.zeros_like(free)])
    accept, alt = accept_drafts(rows, si, si.drafts, free)
    return torch.stack([alt, accept.long()])


def accept_drafts(rows: torch.Tensor, si: SamplingInputs, drafts: list[int],
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
        filtered = filter_rows(rows[idx], [si.params[r] for r in sampled])
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


def token_logprobs(rows: torch.Tensor, tokens: list[int], k: int, *,
                   normalised: bool = False) -> list[tuple[float, list[tuple[int, float]]]]:
    """Per row i: the log-probability of tokens[i] and the k most likely (token, log-probability)
    pairs, best first. `rows` [len(tokens), V] are logits (log_softmax taken here, in float32) or,
    with `normalised`, log-probabilities already. The one place a logprob is read off a row: the
    sampled tokens', verified drafts', forced tokens', scored tokens' and jump-forward's."""
    if not tokens:
        return []
    lp = rows if normalised else torch.log_softmax(rows.float(), dim=-1)
    chosen = lp.gather(1, torch.tensor(tokens, dtype=torch.long).to(lp.device)[:, None])[:, 0].tolist()
    if k <= 0:
        return [(c, []) for c in chosen]
    vals, ids = lp.topk(k, dim=-1)
    return [(c, list(zip(i, v))) for c, i, v in zip(chosen, ids.tolist(), vals.tolist())]
