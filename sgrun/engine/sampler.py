"""Vectorised sampling over a batch of logit rows.

Order: logit_bias, penalties, constraint mask -> temperature,
top-k, top-p, min-p -> greedy argmax or a draw from each row's own generator, so a seeded
request samples the same tokens whatever else shares the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sgrun.engine.sampling_params import SamplingParams


@dataclass
class SampleResult:
    tokens: list[int]
    logprobs: list[float] | None           # chosen token's logprob per row (rows asking for logprobs)
    top: list[list[tuple[int, float]]] | None


def _pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max((len(r) for r in rows), default=0) or 1
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        if r:
            ids[i, : len(r)] = torch.tensor(r)
            valid[i, : len(r)] = True
    return ids, valid


def apply_penalties(logits: torch.Tensor, params: list[SamplingParams], prompts: list[list[int]],
                    outputs: list[list[int]]) -> None:
    """In place. Repetition penalty (transformers semantics) over prompt + output; frequency and
    presence penalties (OpenAI semantics) over the output only."""
    rows = [i for i, p in enumerate(params) if p.frequency_penalty or p.presence_penalty]
    if rows:
        ids, valid = _pad([outputs[i] for i in rows])
        counts = torch.zeros(len(rows), logits.shape[1])
        counts.scatter_add_(1, ids, valid.float())
        freq = torch.tensor([params[i].frequency_penalty for i in rows])[:, None]
        pres = torch.tensor([params[i].presence_penalty for i in rows])[:, None]
        idx = torch.tensor(rows)
        logits[idx] -= freq * counts + pres * (counts > 0).float()
    rows = [i for i, p in enumerate(params) if p.repetition_penalty != 1.0]
    if rows:
        ids, valid = _pad([prompts[i] + outputs[i] for i in rows])
        idx = torch.tensor(rows)
        sub = logits[idx]
        seen = torch.zeros_like(sub, dtype=torch.bool).scatter_(1, ids, valid)
        pen = torch.tensor([params[i].repetition_penalty for i in rows])[:, None]
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
        logits.index_put_((torch.tensor(r), torch.tensor(c)), torch.tensor(v), accumulate=True)


def _filter(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Temperature, top-k, top-p and min-p on sampled rows; masked entries become -inf."""
    temps = torch.tensor([p.temperature for p in params])[:, None]
    logits = logits / temps
    top_k = [p.top_k for p in params]
    top_p = [p.top_p for p in params]
    min_p = [p.min_p for p in params]
    if any(k > 0 for k in top_k) or any(p < 1.0 for p in top_p):
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        V = logits.shape[1]
        ks = torch.tensor([k if k > 0 else V for k in top_k])[:, None]
        drop = torch.arange(V)[None, :] >= ks
        probs = sorted_logits.softmax(dim=-1)
        cum = probs.cumsum(dim=-1) - probs  # mass strictly before each entry
        drop |= cum > torch.tensor(top_p)[:, None]
        drop[:, 0] = False
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.empty_like(logits).scatter_(1, order, sorted_logits)
    if any(m > 0 for m in min_p):
        probs = logits.softmax(dim=-1)
        thresh = probs.max(dim=-1, keepdim=True).values * torch.tensor(min_p)[:, None]
        logits = logits.masked_fill(probs < thresh, float("-inf"))
    return logits


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None],
           want_logprobs: list[int | None], raw_logits: torch.Tensor | None = None) -> SampleResult:
    """logits: [B, V] float32, already biased, penalised and masked. Reported logprobs are those
    of the model itself (`raw_logits`, before any processing), as OpenAI reports them."""
    B = logits.shape[0]
    logprobs = top = None
    if any(k is not None for k in want_logprobs):
        lp = torch.log_softmax(logits if raw_logits is None else raw_logits, dim=-1)
    tokens = torch.empty(B, dtype=torch.long)
    greedy = [i for i, p in enumerate(params) if p.greedy]
    sampled = [i for i, p in enumerate(params) if not p.greedy]
    if greedy:
        g = torch.tensor(greedy)
        tokens[g] = logits[g].argmax(dim=-1)
    if sampled:
        s = torch.tensor(sampled)
        probs = _filter(logits[s], [params[i] for i in sampled]).softmax(dim=-1)
        # Exponential race (equivalent to Gumbel-max): each row draws its noise from its own
        # generator, so its choice does not depend on the other rows.
        noise = torch.empty_like(probs)
        for j, i in enumerate(sampled):
            noise[j].exponential_(generator=generators[i])
        tokens[s] = (probs / noise).argmax(dim=-1)
    token_list = tokens.tolist()
    if any(k is not None for k in want_logprobs):
        chosen = lp.gather(1, tokens[:, None])[:, 0].tolist()
        kmax = max(k or 0 for k in want_logprobs)
        top_vals = top_ids = None
        if kmax > 0:
            top_vals, top_ids = lp.topk(kmax, dim=-1)
            top_vals, top_ids = top_vals.tolist(), top_ids.tolist()
        logprobs, top = [], []
        for i, k in enumerate(want_logprobs):
            logprobs.append(chosen[i])
            top.append(list(zip(top_ids[i][:k], top_vals[i][:k])) if k and top_ids is not None else [])
    return SampleResult(token_list, logprobs, top)
