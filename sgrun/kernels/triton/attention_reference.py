"""Plain torch references for the paged attention and KV-write kernels: loops over sequences,
one gather per sequence, fp32 softmax. The kernels are tested against these.

Pool layout (docs/interfaces.md): per layer `[kv_heads, num_pages, page_size, head_dim]`; a
sequence's context is the pages of its page-table row, in order.

`window` (None: global): a query at position p sees keys at positions j with p - window < j <= p.
"""

from __future__ import annotations

import torch


def _gather_context(cache: torch.Tensor, pages: torch.Tensor, ctx_len: int) -> torch.Tensor:
    """Pool tensor [KV, N, ps, D] + one sequence's page ids -> its context [KV, ctx_len, D]."""
    kv_heads, _, page_size, head_dim = cache.shape
    num_pages = -(-ctx_len // page_size)
    return cache[:, pages[:num_pages].long()].reshape(kv_heads, -1, head_dim)[:, :ctx_len]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float) -> torch.Tensor:
    """q [H, M, D], k/v [KV, L, D], allowed [M, L] bool -> [H, M, D] in fp32 (GQA by repetition)."""
    group = q.shape[0] // k.shape[0]
    k = k.float().repeat_interleave(group, dim=0)
    v = v.float().repeat_interleave(group, dim=0)
    scores = (q.float() @ k.transpose(1, 2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def paged_decode_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                     page_table: torch.Tensor, ctx_lens: torch.Tensor,
                                     scale: float | None = None, window: int | None = None) -> torch.Tensor:
    """q [B, H, D] (one token per sequence) -> [B, H, D]; sequence b attends to its first
    ctx_lens[b] cached tokens (the last `window` of them)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        n = int(ctx_lens[b])
        k = _gather_context(k_cache, page_table[b], n)
        v = _gather_context(v_cache, page_table[b], n)
        allowed = torch.ones(1, n, dtype=torch.bool, device=q.device)
        if window is not None:
            allowed &= torch.arange(n, device=q.device)[None, :] > n - 1 - window
        out[b] = _attend(q[b].unsqueeze(1), k, v, allowed, scale)[:, 0].to(q.dtype)
    return out


def paged_prefill_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                      page_table: torch.Tensor, q_starts: torch.Tensor, q_lens: torch.Tensor,
                                      ctx_lens: torch.Tensor, scale: float | None = None,
                                      out: torch.Tensor | None = None, window: int | None = None) -> torch.Tensor:
    """q [T, H, D] holds S segments: segment s is rows q_starts[s] : q_starts[s] + q_lens[s],
    the last q_lens[s] tokens of a ctx_lens[s]-token context (a cached prefix, then the new
    tokens). Query row i of a segment sits at position ctx_len - q_len + i and attends to keys at
    positions <= its own. Writes those rows of `out` (a new tensor when None) and returns it."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.zeros_like(q) if out is None else out
    for s in range(len(q_lens)):
        start, m, n = int(q_starts[s]), int(q_lens[s]), int(ctx_lens[s])
        k = _gather_context(k_cache, page_table[s], n)
        v = _gather_context(v_cache, page_table[s], n)
        q_pos = torch.arange(n - m, n, device=q.device)[:, None]
        allowed = torch.arange(n, device=q.device)[None, :] <= q_pos
        if window is not None:
            allowed &= torch.arange(n, device=q.device)[None, :] > q_pos - window
        o = _attend(q[start:start + m].transpose(0, 1), k, v, allowed, scale)
        out[start:start + m] = o.transpose(0, 1).to(q.dtype)
    return out


def write_kv_reference(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       pages: torch.Tensor, offsets: torch.Tensor) -> None:
    """In place: token t's K/V ([T, KV, D]) go to slot offsets[t] of page pages[t], every head."""
    k_cache[:, pages.long(), offsets.long()] = k.transpose(0, 1).to(k_cache.dtype)
    v_cache[:, pages.long(), offsets.long()] = v.transpose(0, 1).to(v_cache.dtype)
