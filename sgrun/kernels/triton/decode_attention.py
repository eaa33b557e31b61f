"""Paged decode attention in Triton: one query token per sequence, GQA-grouped, with the context
split into NUM_SPLITS chunks (flash-decoding) so a few long sequences still fill the GPU.

Stage 1, grid (B, kv_heads, NUM_SPLITS): a program holds the query heads of one GQA group as
the rows of one tile, so each K/V block is read from the pool once per group, and runs an
online softmax over its chunk of the context. With one split it writes the output directly;
otherwise it writes the chunk's normalised partial output and its log-sum-exp (log2 domain).
Stage 2, grid (B, H): merges the splits' partials weighted by exp2(lse - max lse).

The chunk length is computed in the kernel from each sequence's own ctx_len, so the grid
depends only on the batch size and NUM_SPLITS, never on the contexts: a CUDA graph captured
for a batch size replays for any contexts. Reference: `paged_decode_attention_reference`.

A sliding window (WINDOW > 0) narrows each sequence's range to its last WINDOW keys before the
split: pages before the window are never read.
"""

from __future__ import annotations

import torch

from sgrun.kernels.triton.attention_block import attend_block
from sgrun.kernels.triton.launch import (
    LOG2E,
    check_pool,
    interpreted,
    next_pow2,
    precision,
    require_triton,
    tile,
    tl,
    triton,
)

# A split shorter than this many keys costs more in merge traffic than it wins in parallelism.
MIN_SPLIT_TOKENS = 256
MAX_SPLITS = 16


def decode_num_splits(batch: int, kv_heads: int, max_ctx_len: int, num_sms: int) -> int:
    """How many context chunks per (sequence, KV head): enough programs for about two waves on
    `num_sms` multiprocessors, no chunk under MIN_SPLIT_TOKENS keys of the longest context."""
    want = -(-2 * num_sms // max(1, batch * kv_heads))
    fit = max(1, max_ctx_len // MIN_SPLIT_TOKENS)
    return max(1, min(want, fit, MAX_SPLITS))


if triton is not None:

    @triton.jit
    def _decode_split_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, part_out_ptr, part_lse_ptr, page_table_ptr, ctx_lens_ptr, rows_ptr,
        stride_qt, stride_qh, stride_ot, stride_oh,
        stride_kh, stride_kp, stride_kt, stride_vh, stride_vp, stride_vt, stride_pt,
        qk_scale, window,
        NUM_HEADS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
        NUM_SPLITS: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
        PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    ):
        b = tl.program_id(0)
        kvh = tl.program_id(1)
        split = tl.program_id(2)
        row = tl.load(rows_ptr + b).to(tl.int64)
        ctx_len = tl.load(ctx_lens_ptr + b)
        # The keys the query sees: [first, ctx_len), its last `window` ones under a sliding window.
        first = tl.where(window > 0, tl.maximum(ctx_len - window, 0), 0)
        # Chunks are whole BLOCK_N blocks, so only the range's last block is ragged.
        chunk = tl.cdiv(tl.cdiv(ctx_len - first, NUM_SPLITS), BLOCK_N) * BLOCK_N
        lo = first + split * chunk
        hi = tl.minimum(ctx_len, lo + chunk)
        offs_g = tl.arange(0, BLOCK_G)
        offs_d = tl.arange(0, BLOCK_D)
        offs_n = tl.arange(0, BLOCK_N)
        g_mask = offs_g < GROUP
        d_mask = offs_d < HEAD_DIM
        heads = kvh * GROUP + offs_g
        q = tl.load(q_ptr + row * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
                    mask=g_mask[:, None] & d_mask[None, :], other=0.0)
        k_base = k_ptr + kvh.to(tl.int64) * stride_kh
        v_base = v_ptr + kvh.to(tl.int64) * stride_vh
        pt_base = page_table_ptr + b.to(tl.int64) * stride_pt

        m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
        for start in range(lo, hi, BLOCK_N):
            n = start + offs_n
            n_mask = n < hi
            # Every block holds at least one real key, so the running max stays finite.
            m_i, l_i, acc = attend_block(q, m_i, l_i, acc, k_base, v_base, pt_base, n, n_mask, n_mask[None, :],
                                         offs_d, d_mask, stride_kp, stride_kt, stride_vp, stride_vt, qk_scale,
                                         PAGE_SIZE, PRECISION, UPCAST)
        # A split past a short context saw no key: l = 0, its lse -inf, its weight 0 in stage 2.
        acc = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
        out_mask = g_mask[:, None] & d_mask[None, :]
        if NUM_SPLITS == 1:
            tl.store(out_ptr + row * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
                     acc.to(out_ptr.dtype.element_ty), mask=out_mask)
        else:
            part = (b.to(tl.int64) * NUM_HEADS + heads) * NUM_SPLITS + split       # [B, H, S] index
            tl.store(part_out_ptr + part[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=out_mask)
            lse = tl.where(l_i > 0.0, m_i + tl.log2(tl.where(l_i > 0.0, l_i, 1.0)), float("-inf"))
            tl.store(part_lse_ptr + part, lse, mask=g_mask)

    @triton.jit
    def _decode_merge_kernel(
        out_ptr, part_out_ptr, part_lse_ptr, rows_ptr, stride_ot, stride_oh,
        NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr,
        BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
    ):
        b = tl.program_id(0)
        h = tl.program_id(1)
        row = tl.load(rows_ptr + b).to(tl.int64)
        offs_s = tl.arange(0, BLOCK_S)
        offs_d = tl.arange(0, BLOCK_D)
        s_mask = offs_s < NUM_SPLITS
        d_mask = offs_d < HEAD_DIM
        base = (b.to(tl.int64) * NUM_HEADS + h) * NUM_SPLITS
        lse = tl.load(part_lse_ptr + base + offs_s, mask=s_mask, other=float("-inf"))
        top = tl.max(lse, axis=0)                      # split 0 always saw a key: finite
        w = tl.exp2(lse - top)
        w = tl.where(s_mask & (lse > float("-inf")), w, 0.0)
        parts = tl.load(part_out_ptr + (base + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
                        mask=s_mask[:, None] & d_mask[None, :], other=0.0)
        o = tl.sum(parts * w[:, None], axis=0) / tl.sum(w, axis=0)
        tl.store(out_ptr + row * stride_ot + h * stride_oh + offs_d, o.to(out_ptr.dtype.element_ty), mask=d_mask)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           page_table: torch.Tensor, ctx_lens: torch.Tensor,
                           rows: torch.Tensor | None = None, out: torch.Tensor | None = None,
                           scale: float | None = None, block_n: int = 64, num_splits: int = 1,
                           window: int | None = None) -> torch.Tensor:
    """Decode attention: sequence b's query is q[rows[b]] ([H, D]; rows defaults to 0..B-1),
    attending to its first ctx_lens[b] >= 1 cached tokens. Writes out[rows[b]] (out defaults to
    a new tensor like q) and returns out. page_table [B, max_pages] and ctx_lens [B] are int32;
    num_splits chunks the context (see decode_num_splits); `window` (None: global) limits each
    query to its last `window` keys."""
    require_triton()
    check_pool(q, k_cache, v_cache)
    B = ctx_lens.shape[0]
    H, D = q.shape[1], q.shape[2]
    kv_heads, _, page_size, _ = k_cache.shape
    group = H // kv_heads
    rows = torch.arange(B, dtype=torch.int32, device=q.device) if rows is None else rows
    out = torch.empty_like(q) if out is None else out
    assert out.shape == q.shape and out.stride(-1) == 1 and num_splits >= 1
    assert page_table.dtype == torch.int32 and ctx_lens.dtype == torch.int32 and page_table.stride(1) == 1
    if B == 0:
        return out
    scale = D ** -0.5 if scale is None else scale
    part_out = part_lse = out   # unused placeholders when there is a single split
    if num_splits > 1:
        part_out = torch.empty(B, H, num_splits, D, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(B, H, num_splits, dtype=torch.float32, device=q.device)
    _decode_split_kernel[(B, kv_heads, num_splits)](
        q, k_cache, v_cache, out, part_out, part_lse, page_table, ctx_lens, rows,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), page_table.stride(0),
        scale * LOG2E, window or 0,
        NUM_HEADS=H, GROUP=group, HEAD_DIM=D, PAGE_SIZE=page_size, NUM_SPLITS=num_splits,
        BLOCK_G=tile(group), BLOCK_D=tile(D), BLOCK_N=tile(block_n),
        PRECISION=precision(q.dtype), UPCAST=interpreted(_decode_split_kernel),
    )
    if num_splits > 1:
        _decode_merge_kernel[(B, H)](
            out, part_out, part_lse, rows, out.stride(0), out.stride(1),
            NUM_HEADS=H, HEAD_DIM=D, NUM_SPLITS=num_splits,
            BLOCK_S=next_pow2(num_splits), BLOCK_D=next_pow2(D),
        )
    return out
