"""Attention over the paged KV pool with the Triton kernels (the CUDA backend).

Implements the AttentionBackend protocol (attention/backend.py) with the same batch model as
the torch backend: prepare() once per batch, forward() per layer. prepare() turns the segments
into int32 kernel metadata on the pool's device: single-token segments (decodes) for the split-K
decode kernel, the rest (prefill chunks, possibly after a cached prefix) for the extend kernel.
Each forward is one KV-write launch plus at most two attention launches (and the split merge),
whatever the batch's mix.

For CUDA graphs, `bind_static_decode` points the decode metadata at persistent buffers once per
captured batch size; the graph runner then only refills those buffers before each replay.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sgrun.engine.parts.attention.backend import Segment
from sgrun.engine.state.page_pool import PagePool
from sgrun.kernels.triton import decode_num_splits, paged_decode_attention, paged_prefill_attention, write_kv


@dataclass
class DecodeMeta:
    page_table: torch.Tensor   # [B, max_pages] int32
    ctx_lens: torch.Tensor     # [B] int32
    rows: torch.Tensor         # [B] int32: the batch row of each decode
    num_splits: int


@dataclass
class ExtendMeta:
    page_table: torch.Tensor   # [S, max_pages] int32
    q_starts: torch.Tensor
    q_lens: torch.Tensor
    ctx_lens: torch.Tensor
    max_q_len: int


def _device_int32(values: list[int] | torch.Tensor, device: torch.device) -> torch.Tensor:
    t = values.to(torch.int32) if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=torch.int32)
    if device.type == "cuda":   # pinned staging, so the copy does not block the host
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def page_table(segments: list[Segment]) -> torch.Tensor:
    """[S, max_pages] int32 on the host, rows padded with page 0 (never read past a context)."""
    width = max(len(s.pages) for s in segments)
    table = torch.zeros(len(segments), width, dtype=torch.int32)
    for i, s in enumerate(segments):
        table[i, : len(s.pages)] = s.pages
    return table


def device_sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4   # CPU tensors run the kernels in Triton's interpreter: parallelism does not matter


class TritonPagedAttention:
    def __init__(self, pool: PagePool, num_heads: int, num_kv_heads: int, head_dim: int):
        self.pool = pool
        self.H, self.KV, self.D = num_heads, num_kv_heads, head_dim
        self.scale = head_dim ** -0.5
        self.windows: list[int | None] = [None] * len(pool.k)
        self.device = pool.k[0].device
        self.num_sms = device_sm_count(self.device)
        self.decode: DecodeMeta | None = None
        self.extend: ExtendMeta | None = None

    def configure(self, scale: float, windows: list[int | None]) -> None:
        """The model's softmax scale and per-layer sliding windows (None: global); both kernels
        apply a layer's window (p - window < j <= p)."""
        if len(windows) != len(self.pool.k):
            raise ValueError(f"{len(windows)} layer windows for a pool of {len(self.pool.k)} layers")
        self.scale = float(scale)
        self.windows = list(windows)

    def prepare(self, write_pages: torch.Tensor, write_offsets: torch.Tensor, segments: list[Segment]) -> None:
        """Precompute per-batch metadata once; every layer reuses it. The new tokens' K/V go to
        (write_pages[i], write_offsets[i]) in batch row order."""
        dev = self.device
        self.write_pages, self.write_offsets = _device_int32(write_pages, dev), _device_int32(write_offsets, dev)
        decodes = [s for s in segments if s.q_len == 1]
        prefills = [s for s in segments if s.q_len > 1]
        self.decode = None
        if decodes:
            splits = decode_num_splits(len(decodes), self.KV, max(s.ctx_len for s in decodes), self.num_sms)
            self.decode = DecodeMeta(_device_int32(page_table(decodes), dev),
                                     _device_int32([s.ctx_len for s in decodes], dev),
                                     _device_int32([s.q_start for s in decodes], dev), splits)
        self.extend = None
        if prefills:
            self.extend = ExtendMeta(_device_int32(page_table(prefills), dev),
                                     _device_int32([s.q_start for s in prefills], dev),
                                     _device_int32([s.q_len for s in prefills], dev),
                                     _device_int32([s.ctx_len for s in prefills], dev),
                                     max(s.q_len for s in prefills))

    def bind_static_decode(self, write_pages: torch.Tensor, write_offsets: torch.Tensor, meta: DecodeMeta) -> None:
        """Decode-only batch whose metadata lives in persistent buffers (CUDA-graph capture and
        replay): later forwards read whatever those buffers hold at the time."""
        self.write_pages, self.write_offsets = write_pages, write_offsets
        self.decode, self.extend = meta, None

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [T, H, D], k/v: [T, KV, D] for the new tokens. Returns [T, H, D]."""
        k_cache, v_cache = self.pool.k[layer], self.pool.v[layer]
        write_kv(k, v, k_cache, v_cache, self.write_pages, self.write_offsets)
        out = torch.empty_like(q)
        if self.decode is not None:
            d = self.decode
            paged_decode_attention(q, k_cache, v_cache, d.page_table, d.ctx_lens, rows=d.rows, out=out,
                                   scale=self.scale, num_splits=d.num_splits, window=self.windows[layer])
        if self.extend is not None:
            e = self.extend
            paged_prefill_attention(q, k_cache, v_cache, e.page_table, e.q_starts, e.q_lens, e.ctx_lens,
                                    e.max_q_len, out=out, scale=self.scale, window=self.windows[layer])
        return out
