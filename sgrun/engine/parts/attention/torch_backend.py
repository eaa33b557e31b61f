"""Attention over the paged KV pool, in pure torch (the CPU backend of attention/backend.py).

A batch is a list of segments, one per scheduled request: `q_len` new tokens attending to the
request's whole context (cached + new tokens, `ctx_len`) held in the pages `pages`.
Single-token segments (decodes) are attended together, in groups of similar context length:
a group's pages are gathered once per layer into one [KV * B, L, D] block and two batched
matmuls cover every head of every request in it.
Longer segments (prefill chunks) go one by one through SDPA.
The pool may hold float16 or bf16 under a float32 model (kv_cache_dtype): K and V are rounded when
written and widened to the query's dtype when read, so every product is float32.

`configure(scale, windows)` sets the softmax scale and each layer's sliding window: a query at
position p attends keys at positions j with p - window < j <= p (transformers' sliding mask);
the masks for each distinct window are built once per batch in prepare().
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sgrun.engine.parts.attention.backend import Segment
from sgrun.engine.state.page_pool import PagePool


class TorchPagedAttention:
    # Whether this class's attention applies configure()'s windows. Only a class that sets it in
    # its own body counts (a subclass whose kernels do not apply windows inherits the refusal):
    # windows are never silently ignored.
    applies_windows = True

    def __init__(self, pool: PagePool, num_heads: int, num_kv_heads: int, head_dim: int):
        self.pool = pool
        self.H, self.KV, self.D = num_heads, num_kv_heads, head_dim
        self.scale = head_dim ** -0.5
        self.sdpa_scale: float | None = None
        self.windows: list[int | None] = [None] * len(pool.k)
        # Decode q.k in float32: bf16 scores are rounded before the softmax (a step of 0.06 at
        # score 10) and the upcast is cheap next to the GEMMs.
        self.score_dtype = torch.float32

    def configure(self, scale: float, windows: list[int | None]) -> None:
        """The model's softmax scale and per-layer sliding windows (None: global)."""
        if len(windows) != len(self.pool.k):
            raise ValueError(f"{len(windows)} layer windows for a pool of {len(self.pool.k)} layers")
        if any(w is not None for w in windows) and "applies_windows" not in type(self).__dict__:
            raise ValueError(f"{type(self).__name__} does not apply sliding windows")
        self.scale = float(scale)
        # SDPA's own default when the scale is the default one: bitwise what it always computed.
        self.sdpa_scale = None if self.scale == self.D ** -0.5 else self.scale
        self.windows = list(windows)

    def prepare(self, write_pages: torch.Tensor, write_offsets: torch.Tensor, segments: list[Segment]) -> None:
        """Precompute per-batch index tensors once; every layer reuses them. The new tokens'
        K/V go to (write_pages[i], write_offsets[i]) in batch row order."""
        dev = self.pool.k[0].device   # index tensors and masks live with the pool (no-op on CPU)
        self.write_pages, self.write_offsets = write_pages.to(dev), write_offsets.to(dev)
        self.prefills = [s for s in segments if s.q_len > 1]
        self.prefill_pages = [s.pages.to(dev) for s in self.prefills]
        self._prepare_decodes([s for s in segments if s.q_len == 1])
        self._prepare_prefills()

    def _prepare_prefills(self) -> None:
        """Per prefill segment, a boolean mask [q, ctx] per distinct window (None: plain causal
        over a segment with no cached context)."""
        dev = self.pool.k[0].device
        self.prefill_masks = []
        for s in self.prefills:
            masks: dict[int | None, torch.Tensor | None] = {}
            q_pos = torch.arange(s.ctx_len - s.q_len, s.ctx_len)[:, None]
            keys = torch.arange(s.ctx_len)[None, :]
            for window in set(self.windows):
                if window is None and s.ctx_len == s.q_len:
                    masks[window] = None
                    continue
                allowed = keys <= q_pos
                if window is not None:
                    allowed &= keys > q_pos - window
                masks[window] = allowed.to(dev)
            self.prefill_masks.append(masks)

    def _prepare_decodes(self, decodes: list[Segment]) -> None:
        # Decodes are batched in groups of similar context length: each group is padded to its
        # longest member, so a short context does not copy a long one's worth of padding.
        self.decode_groups = [self._decode_group(g) for g in _length_groups(decodes)]

    def _attend_decodes(self, layer: int, q: torch.Tensor, out: torch.Tensor) -> None:
        """Write the single-token segments' attention into `out` (rows of the flat batch)."""
        window = self.windows[layer]
        for rows, pages, masks in self.decode_groups:
            out[rows] = self._decode(layer, q[rows], pages, masks[window])

    def _gather(self, cache: torch.Tensor, pages: torch.Tensor) -> torch.Tensor:
        """[KV, N, ps, D] pool tensor -> [KV, len(pages) * ps, D], contiguous."""
        return cache.index_select(1, pages).view(self.KV, -1, self.D)

    def _decode_group(self, decodes: list[Segment]) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """(batch rows, gathered page ids, {window: additive mask [1, B, 1, L]}) for one decode group."""
        ps = self.pool.page_size
        max_pages = max(len(s.pages) for s in decodes)
        pages = torch.zeros(len(decodes), max_pages, dtype=torch.long)
        for i, s in enumerate(decodes):
            pages[i, : len(s.pages)] = s.pages
        lens = torch.tensor([s.ctx_len for s in decodes])
        keys = torch.arange(max_pages * ps)[None, :]
        dev = self.pool.k[0].device
        masks = {}
        for window in set(self.windows):
            hidden = keys >= lens[:, None]
            if window is not None:   # the query is at position len - 1
                hidden |= keys <= lens[:, None] - 1 - window
            mask = torch.zeros(len(decodes), max_pages * ps).masked_fill_(hidden, float("-inf"))
            masks[window] = mask[None, :, None, :].to(dev)
        rows = torch.tensor([s.q_start for s in decodes], dtype=torch.long)
        return rows.to(dev), pages.view(-1).to(dev), masks

    def _decode(self, layer: int, q: torch.Tensor, pages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Single-token queries [B, H, D] against their paged contexts: the pages are gathered
        once into [KV * B, L, D] and two batched matmuls cover every head of every request."""
        B, (H, KV, D) = q.shape[0], (self.H, self.KV, self.D)
        G = H // KV
        L = mask.shape[-1]
        k = self._gather(self.pool.k[layer], pages).view(KV * B, L, D)
        v = self._gather(self.pool.v[layer], pages).view(KV * B, L, D)
        qg = q.view(B, KV, G, D).transpose(0, 1).reshape(KV * B, G, D)
        sd = self.score_dtype
        scores = torch.bmm(qg.to(sd), k.to(sd).transpose(1, 2)).view(KV, B, G, L).float() * self.scale
        probs = torch.softmax(scores + mask, dim=-1).to(q.dtype).view(KV * B, G, L)
        return torch.bmm(probs, v.to(probs.dtype)).view(KV, B, G, D).transpose(0, 1).reshape(B, H, D)

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [T, H, D], k/v: [T, KV, D] for the new tokens. Returns [T, H, D]."""
        self._write_kv(layer, k, v)
        return self._attend(layer, q, k, v)

    def _write_kv(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """The new tokens' K/V into the pool at (write_pages, write_offsets)."""
        k_cache, v_cache = self.pool.k[layer], self.pool.v[layer]
        k_cache[:, self.write_pages, self.write_offsets] = _narrowed(k.transpose(0, 1), k_cache.dtype)
        v_cache[:, self.write_pages, self.write_offsets] = _narrowed(v.transpose(0, 1), v_cache.dtype)

    def _attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        self._attend_decodes(layer, q, out)
        self._attend_prefills(layer, q, k, v, out)
        return out

    def _attend_prefills(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         out: torch.Tensor) -> None:
        """Write the prefill chunks' attention into `out`, one SDPA call per segment."""
        k_cache, v_cache = self.pool.k[layer], self.pool.v[layer]
        window = self.windows[layer]
        for s, pages, masks in zip(self.prefills, self.prefill_pages, self.prefill_masks):
            mask = masks[window]
            rows = slice(s.q_start, s.q_start + s.q_len)
            qs = q[rows].transpose(0, 1).unsqueeze(0)                   # [1, H, q, D]
            if mask is None and k_cache.dtype == q.dtype:
                ks = k[rows].transpose(0, 1).unsqueeze(0)
                vs = v[rows].transpose(0, 1).unsqueeze(0)
                o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True, scale=self.sdpa_scale)
            else:   # the context from the pages (a narrower pool's rounded K/V, as decodes will read them)
                ks = self._gather(k_cache, pages)[:, : s.ctx_len].unsqueeze(0).to(q.dtype)   # [1, KV, ctx, D]
                vs = self._gather(v_cache, pages)[:, : s.ctx_len].unsqueeze(0).to(q.dtype)
                if mask is None:
                    o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True, scale=self.sdpa_scale)
                else:
                    o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, enable_gqa=True, scale=self.sdpa_scale)
            out[rows] = o[0].transpose(0, 1)


def _narrowed(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in the pool's dtype: a float16 pool under float32 saturates at +-65504 (as the C++ write,
    kernels/cpu/paged_decode.cpp), so a key out of range stays finite."""
    if dtype == torch.float16 and x.dtype == torch.float32:
        x = x.clamp(-65504.0, 65504.0)
    return x.to(dtype)


# A context shorter than this fraction of its group's longest starts a new group.
_GROUP_MIN_FILL = 0.6


def _length_groups(decodes: list[Segment]) -> list[list[Segment]]:
    groups: list[list[Segment]] = []
    for s in sorted(decodes, key=lambda s: -len(s.pages)):
        if groups and len(s.pages) >= _GROUP_MIN_FILL * len(groups[-1][0].pages):
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups
