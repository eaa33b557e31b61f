"""Extend (prefill) attention in Triton: a chunk of new query tokens per sequence attending to
the sequence's cached prefix plus, causally, to the chunk itself — the radix-cache case, where a
request's prompt starts with pages another request already computed.

K/V are read straight from the paged pool (the new tokens' K/V written first, by `write_kv`),
so a cached prefix and the new tokens are one context to the kernel. Reference:
`attention_reference.paged_prefill_attention_reference`.

A sliding window (WINDOW > 0) hides keys at or before q_pos - WINDOW from each query row; the
loop starts at the block holding the block's first query's first visible key.
"""

from __future__ import annotations

import math

import torch

from sgrun.kernels.triton.attention_block import attend_block
from sgrun.kernels.triton.launch import LOG2E, check_pool, interpreted, precision, require_triton, tile, tl, triton

if triton is not None:

    @triton.jit
    def _extend_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, page_table_ptr, q_starts_ptr, q_lens_ptr, ctx_lens_ptr,
        stride_qt, stride_qh, stride_ot, stride_oh,
        stride_kh, stride_kp, stride_kt, stride_vh, stride_vp, stride_vt, stride_pt,
        qk_scale, window,
        GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
        UPCAST: tl.constexpr,
    ):
        # One program per (segment, block of BLOCK_M query rows, query head).
        seg = tl.program_id(0)
        m_block = tl.program_id(1)
        h = tl.program_id(2)
        kvh = h // GROUP
        q_start = tl.load(q_starts_ptr + seg)
        q_len = tl.load(q_lens_ptr + seg)
        ctx_len = tl.load(ctx_lens_ptr + seg)
        offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        offs_n = tl.arange(0, BLOCK_N)
        m_mask = offs_m < q_len
        d_mask = offs_d < HEAD_DIM
        rows = (q_start + offs_m).to(tl.int64)
        q = tl.load(q_ptr + rows[:, None] * stride_qt + h * stride_qh + offs_d[None, :],
                    mask=m_mask[:, None] & d_mask[None, :], other=0.0)
        q_pos = ctx_len - q_len + offs_m          # absolute position of each query row
        # Keys past this block's last query are never visible; a block past the segment's end
        # (segments are shorter than the grid's longest) loops zero times and stores nothing.
        kv_end = tl.minimum(ctx_len, ctx_len - q_len + (m_block + 1) * BLOCK_M)
        kv_end = tl.where(m_block * BLOCK_M < q_len, kv_end, 0)
        k_base = k_ptr + kvh.to(tl.int64) * stride_kh
        v_base = v_ptr + kvh.to(tl.int64) * stride_vh
        pt_base = page_table_ptr + seg.to(tl.int64) * stride_pt

        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        kv_start = 0
        if window > 0:   # the earliest key any row of this block sees, rounded down to a block
            kv_start = tl.maximum(ctx_len - q_len + m_block * BLOCK_M - window + 1, 0) // BLOCK_N * BLOCK_N
        for start in range(kv_start, kv_end, BLOCK_N):
            n = start + offs_n
            n_mask = n < ctx_len
            visible = n_mask[None, :] & (n[None, :] <= q_pos[:, None])
            if window > 0:
                visible = visible & (n[None, :] > q_pos[:, None] - window)
            # Key 0 is visible to every row and is in the first block, so after it m_i is finite;
            # a later block wholly hidden from a row leaves that row's max unchanged (p = 0).
            m_i, l_i, acc = attend_block(q, m_i, l_i, acc, k_base, v_base, pt_base, n, n_mask, visible,
                                         offs_d, d_mask, stride_kp, stride_kt, stride_vp, stride_vt, qk_scale,
                                         PAGE_SIZE, PRECISION, UPCAST)
        l_i = tl.where(l_i == 0.0, 1.0, l_i)       # rows that saw no block are masked out below
        acc = acc / l_i[:, None]
        tl.store(out_ptr + rows[:, None] * stride_ot + h * stride_oh + offs_d[None, :],
                 acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & d_mask[None, :])


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            page_table: torch.Tensor, q_starts: torch.Tensor, q_lens: torch.Tensor,
                            ctx_lens: torch.Tensor, max_q_len: int, out: torch.Tensor | None = None,
                            scale: float | None = None, block_m: int = 16, block_n: int = 32,
                            window: int | None = None) -> torch.Tensor:
    """Extend attention over S segments of q [T, H, D] (see paged_prefill_attention_reference);
    metadata tensors are int32, max_q_len = max(q_lens); `window` (None: global) is the sliding
    window. Writes the segments' rows of `out` and returns it."""
    require_triton()
    check_pool(q, k_cache, v_cache)
    S = q_lens.shape[0]
    H, D = q.shape[1], q.shape[2]
    kv_heads, _, page_size, _ = k_cache.shape
    out = torch.zeros_like(q) if out is None else out
    assert out.shape == q.shape and out.stride(-1) == 1
    assert page_table.dtype == q_starts.dtype == q_lens.dtype == ctx_lens.dtype == torch.int32
    assert page_table.stride(1) == 1
    if S == 0:
        return out
    scale = D ** -0.5 if scale is None else scale
    grid = (S, math.ceil(max_q_len / block_m), H)
    _extend_kernel[grid](
        q, k_cache, v_cache, out, page_table, q_starts, q_lens, ctx_lens,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), page_table.stride(0),
        scale * LOG2E, window or 0,
        GROUP=H // kv_heads, HEAD_DIM=D, PAGE_SIZE=page_size,
        BLOCK_M=tile(block_m), BLOCK_D=tile(D), BLOCK_N=tile(block_n),
        PRECISION=precision(q.dtype), UPCAST=interpreted(_extend_kernel),
    )
    return out
