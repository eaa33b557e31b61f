"""Attention over the paged KV pool, in pure torch (the CPU backend).

A batch is a list of segments, one per scheduled request: `q_len` new tokens whose K/V are
written to `slots`, attending to the request's whole context (cached + new) at `ctx_slots`.
Single-token segments (decodes) are attended together in one padded batched matmul; longer
segments (prefill chunks) one by one with SDPA.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sgrun.engine.page_pool import PagePool


@dataclass
class Segment:
    q_start: int        # first row of this segment in the flat batch
    q_len: int
    ctx_len: int        # context length after this step (cached + new tokens)
    ctx_slots: torch.Tensor  # [ctx_len] pool slots of the whole context, new tokens last


class TorchPagedAttention:
    def __init__(self, pool: PagePool, num_heads: int, num_kv_heads: int, head_dim: int):
        self.pool = pool
        self.H, self.KV, self.D = num_heads, num_kv_heads, head_dim
        self.scale = head_dim ** -0.5

    def prepare(self, slots: torch.Tensor, segments: list[Segment]) -> None:
        """Precompute per-batch index tensors once; every layer reuses them."""
        self.slots = slots
        self.prefills = [s for s in segments if s.q_len > 1]
        decodes = [s for s in segments if s.q_len == 1]
        self.decode_rows = torch.tensor([s.q_start for s in decodes], dtype=torch.long)
        self.decode_gather = None
        if decodes:
            max_len = max(s.ctx_len for s in decodes)
            gather = torch.zeros(len(decodes), max_len, dtype=torch.long)
            lens = torch.tensor([s.ctx_len for s in decodes])
            for i, s in enumerate(decodes):
                gather[i, : s.ctx_len] = s.ctx_slots
            self.decode_gather = gather
            # Additive mask [B, 1, 1, L]: 0 inside the context, -inf in the padding.
            pad = torch.arange(max_len)[None, :] >= lens[:, None]
            self.decode_mask = torch.zeros(len(decodes), max_len).masked_fill_(pad, float("-inf"))[:, None, None, :]
        self.prefill_masks = []
        for s in self.prefills:
            if s.ctx_len == s.q_len:
                self.prefill_masks.append(None)  # no cached context: plain causal
            else:
                q_pos = torch.arange(s.ctx_len - s.q_len, s.ctx_len)[:, None]
                self.prefill_masks.append(torch.arange(s.ctx_len)[None, :] <= q_pos)

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [T, H, D], k/v: [T, KV, D] for the new tokens. Returns [T, H, D]."""
        k_cache, v_cache = self.pool.k_flat[layer], self.pool.v_flat[layer]
        k_cache[self.slots] = k
        v_cache[self.slots] = v
        out = torch.empty_like(q)
        H, KV, D = self.H, self.KV, self.D
        G = H // KV
        if self.decode_gather is not None:
            B, L = self.decode_gather.shape
            kd = k_cache[self.decode_gather].permute(0, 2, 3, 1)       # [B, KV, D, L]
            vd = v_cache[self.decode_gather].transpose(1, 2)           # [B, KV, L, D]
            qd = q[self.decode_rows].view(B, KV, G, D)
            scores = torch.matmul(qd, kd).float() * self.scale         # [B, KV, G, L]
            probs = torch.softmax(scores + self.decode_mask, dim=-1).to(q.dtype)
            out[self.decode_rows] = torch.matmul(probs, vd).reshape(B, H, D)
        for s, mask in zip(self.prefills, self.prefill_masks):
            rows = slice(s.q_start, s.q_start + s.q_len)
            qs = q[rows].transpose(0, 1).unsqueeze(0)                   # [1, H, q, D]
            if mask is None:
                ks = k[rows].transpose(0, 1).unsqueeze(0)
                vs = v[rows].transpose(0, 1).unsqueeze(0)
                o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)
            else:
                ks = k_cache[s.ctx_slots].transpose(0, 1).unsqueeze(0)  # [1, KV, ctx, D]
                vs = v_cache[s.ctx_slots].transpose(0, 1).unsqueeze(0)
                o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, enable_gqa=True)
            out[rows] = o[0].transpose(0, 1)
        return out
