"""Attention over the paged KV pool with the Triton kernels (the CUDA backend).

Implements the AttentionBackend protocol (attention_backend.py), with the same batch model as
TorchPagedAttention (attention_torch.py): prepare() once per batch,
forward() per layer. prepare() turns the segments into int32 kernel metadata on the pool's
device: single-token segments (decodes) for the decode kernel, the rest (prefill chunks) for the
prefill kernel. Each forward writes the new tokens' K/V into their pages, then runs at most two
kernel launches, whatever the batch's mix.
"""

from __future__ import annotations

import torch

from sgrun.engine.attention_backend import Segment
from sgrun.engine.page_pool import PagePool
from sgrun.kernels import paged_decode_attention, paged_prefill_attention


def _page_table(segments: list[Segment], device: torch.device) -> torch.Tensor:
    """[S, max_pages] int32, rows padded with page 0 (the kernels never read past a context)."""
    width = max(len(s.pages) for s in segments)
    table = torch.zeros(len(segments), width, dtype=torch.int32)
    for i, s in enumerate(segments):
        table[i, : len(s.pages)] = s.pages
    return table.to(device)


def _int32(values: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32).to(device)


class TritonPagedAttention:
    def __init__(self, pool: PagePool, num_heads: int, num_kv_heads: int, head_dim: int):
        self.pool = pool
        self.H, self.KV, self.D = num_heads, num_kv_heads, head_dim
        self.scale = head_dim ** -0.5
        self.device = pool.k[0].device

    def prepare(self, write_pages: torch.Tensor, write_offsets: torch.Tensor, segments: list[Segment]) -> None:
        """Precompute per-batch metadata once; every layer reuses it. The new tokens' K/V go to
        (write_pages[i], write_offsets[i]) in batch row order."""
        dev = self.device
        self.write_pages, self.write_offsets = write_pages.to(dev), write_offsets.to(dev)
        decodes = [s for s in segments if s.q_len == 1]
        prefills = [s for s in segments if s.q_len > 1]
        self.decode = None
        if decodes:
            self.decode = (_page_table(decodes, dev), _int32([s.ctx_len for s in decodes], dev),
                           _int32([s.q_start for s in decodes], dev))
        self.prefill = None
        if prefills:
            self.prefill = (_page_table(prefills, dev), _int32([s.q_start for s in prefills], dev),
                            _int32([s.q_len for s in prefills], dev), _int32([s.ctx_len for s in prefills], dev))
            self.max_q_len = max(s.q_len for s in prefills)

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [T, H, D], k/v: [T, KV, D] for the new tokens. Returns [T, H, D]."""
        k_cache, v_cache = self.pool.k[layer], self.pool.v[layer]
        k_cache[:, self.write_pages, self.write_offsets] = k.transpose(0, 1)
        v_cache[:, self.write_pages, self.write_offsets] = v.transpose(0, 1)
        out = torch.empty_like(q)
        if self.decode is not None:
            page_table, ctx_lens, rows = self.decode
            paged_decode_attention(q, k_cache, v_cache, page_table, ctx_lens, rows=rows, out=out, scale=self.scale)
        if self.prefill is not None:
            page_table, q_starts, q_lens, ctx_lens = self.prefill
            paged_prefill_attention(q, k_cache, v_cache, page_table, q_starts, q_lens, ctx_lens,
                                    self.max_q_len, out=out, scale=self.scale)
        return out
