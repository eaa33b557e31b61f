"""Paged attention in Triton: decode (one query token per sequence) and prefill (a chunk of
query tokens per sequence, causal after the cached context), each with a plain torch reference.

Both read K/V straight from the pool layout `[kv_heads, num_pages, page_size, head_dim]` through
a page table `[S, max_pages]` (int32 page ids, row s = sequence s; entries past a sequence's
context are never read). Every block of keys is gathered token by token (`page_table[n //
page_size]`, offset `n % page_size`), so a block may span several pages and the page size need
not be a power of two. Softmax is online (running max and sum) in fp32; the two matmuls run in
the input dtype with fp32 accumulation, fp32 inputs in full IEEE precision (no TF32).

The new tokens' K/V must already be written to their pages: the kernels only read the pool.
"""

from __future__ import annotations

import math

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs without triton: the references and the torch backend still work
    triton = None

_LOG2E = 1.4426950408889634


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


# --------------------------------------------------------------------------------------------
# Torch references: plain loops over sequences, one gather per sequence, fp32 softmax.
# --------------------------------------------------------------------------------------------

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
                                     scale: float | None = None) -> torch.Tensor:
    """q [B, H, D] (one token per sequence) -> [B, H, D]; sequence b attends to its first
    ctx_lens[b] cached tokens."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        n = int(ctx_lens[b])
        k = _gather_context(k_cache, page_table[b], n)
        v = _gather_context(v_cache, page_table[b], n)
        allowed = torch.ones(1, n, dtype=torch.bool, device=q.device)
        out[b] = _attend(q[b].unsqueeze(1), k, v, allowed, scale)[:, 0].to(q.dtype)
    return out


def paged_prefill_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                      page_table: torch.Tensor, q_starts: torch.Tensor, q_lens: torch.Tensor,
                                      ctx_lens: torch.Tensor, scale: float | None = None,
                                      out: torch.Tensor | None = None) -> torch.Tensor:
    """q [T, H, D] holds S segments: segment s is rows q_starts[s] : q_starts[s] + q_lens[s],
    the last q_lens[s] tokens of a ctx_lens[s]-token context. Query row i of a segment sits at
    position ctx_len - q_len + i and attends to keys at positions <= its own. Writes those rows
    of `out` (a new tensor when None) and returns it."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.zeros_like(q) if out is None else out
    for s in range(len(q_lens)):
        start, m, n = int(q_starts[s]), int(q_lens[s]), int(ctx_lens[s])
        k = _gather_context(k_cache, page_table[s], n)
        v = _gather_context(v_cache, page_table[s], n)
        q_pos = torch.arange(n - m, n, device=q.device)[:, None]
        allowed = torch.arange(n, device=q.device)[None, :] <= q_pos
        o = _attend(q[start:start + m].transpose(0, 1), k, v, allowed, scale)
        out[start:start + m] = o.transpose(0, 1).to(q.dtype)
    return out


# --------------------------------------------------------------------------------------------
# Triton kernels
# --------------------------------------------------------------------------------------------

if triton is not None:

    @triton.jit
    def _dot(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
        # Triton's CPU interpreter (3.x) multiplies bf16 tiles as raw uint16 bits; under it the
        # operands go through fp32 instead (values already rounded to the input dtype).
        if UPCAST:
            r = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        else:
            r = tl.dot(a, b, input_precision=PRECISION)
        return r

    @triton.jit
    def _decode_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, page_table_ptr, ctx_lens_ptr, rows_ptr,
        stride_qt, stride_qh, stride_ot, stride_oh,
        stride_kh, stride_kp, stride_kt, stride_vh, stride_vp, stride_vt, stride_pt,
        qk_scale,
        GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
        BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
        UPCAST: tl.constexpr,
    ):
        # One program per (sequence, KV head): the GROUP query heads sharing that KV head are the
        # rows of one [BLOCK_G, D] tile, so each K/V block is read once for the whole group.
        b = tl.program_id(0)
        kvh = tl.program_id(1)
        row = tl.load(rows_ptr + b).to(tl.int64)
        ctx_len = tl.load(ctx_lens_ptr + b)
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
        for start in range(0, ctx_len, BLOCK_N):
            n = start + offs_n
            n_mask = n < ctx_len
            page = tl.load(pt_base + n // PAGE_SIZE, mask=n_mask, other=0).to(tl.int64)
            slot = n % PAGE_SIZE
            kv_mask = n_mask[:, None] & d_mask[None, :]
            k = tl.load(k_base + page[:, None] * stride_kp + slot[:, None] * stride_kt + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            v = tl.load(v_base + page[:, None] * stride_vp + slot[:, None] * stride_vt + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            s = _dot(q, tl.trans(k), PRECISION, UPCAST) * qk_scale   # log2 domain
            s = tl.where(n_mask[None, :], s, float("-inf"))
            # Every block holds at least one real token, so m_new is finite and exp2 is safe.
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, PRECISION, UPCAST)
            m_i = m_new
        acc = acc / l_i[:, None]
        tl.store(out_ptr + row * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
                 acc.to(out_ptr.dtype.element_ty), mask=g_mask[:, None] & d_mask[None, :])

    @triton.jit
    def _prefill_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, page_table_ptr, q_starts_ptr, q_lens_ptr, ctx_lens_ptr,
        stride_qt, stride_qh, stride_ot, stride_oh,
        stride_kh, stride_kp, stride_kt, stride_vh, stride_vp, stride_vt, stride_pt,
        qk_scale,
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
        for start in range(0, kv_end, BLOCK_N):
            n = start + offs_n
            n_mask = n < ctx_len
            page = tl.load(pt_base + n // PAGE_SIZE, mask=n_mask, other=0).to(tl.int64)
            slot = n % PAGE_SIZE
            kv_mask = n_mask[:, None] & d_mask[None, :]
            k = tl.load(k_base + page[:, None] * stride_kp + slot[:, None] * stride_kt + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            v = tl.load(v_base + page[:, None] * stride_vp + slot[:, None] * stride_vt + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            s = _dot(q, tl.trans(k), PRECISION, UPCAST) * qk_scale
            visible = n_mask[None, :] & (n[None, :] <= q_pos[:, None])
            s = tl.where(visible, s, float("-inf"))
            # Key 0 is visible to every row and is in the first block, so after it m_i is finite;
            # a later block wholly hidden from a row leaves that row's max unchanged (p = 0).
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, PRECISION, UPCAST)
            m_i = m_new
        l_i = tl.where(l_i == 0.0, 1.0, l_i)       # rows that saw no block are masked out below
        acc = acc / l_i[:, None]
        tl.store(out_ptr + rows[:, None] * stride_ot + h * stride_oh + offs_d[None, :],
                 acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & d_mask[None, :])


def _require_triton() -> None:
    if triton is None:
        raise RuntimeError("the Triton kernels need triton: pip install 'sgrun[gpu]'; on CPU the engine uses the torch backend")


def _check_pool(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    assert q.dim() == 3 and q.stride(-1) == 1, "q must be [T, H, D] with unit stride on D"
    assert k_cache.dim() == 4 and k_cache.shape == v_cache.shape, "pool tensors are [KV, N, page_size, D]"
    assert k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    assert q.shape[1] % k_cache.shape[0] == 0, "query heads must be a multiple of KV heads"
    assert q.shape[2] == k_cache.shape[3] and q.dtype == k_cache.dtype == v_cache.dtype


def _interpreted() -> bool:
    # TRITON_INTERPRET is read when a kernel is decorated, so ask the kernel, not the environment.
    return type(_decode_kernel).__name__ == "InterpretedFunction"


def _precision(dtype: torch.dtype) -> str:
    # TF32 would cost fp32 inputs ~3 decimal digits; half types ignore the setting.
    return "ieee" if dtype == torch.float32 else "tf32"


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           page_table: torch.Tensor, ctx_lens: torch.Tensor,
                           rows: torch.Tensor | None = None, out: torch.Tensor | None = None,
                           scale: float | None = None, block_n: int = 64) -> torch.Tensor:
    """Decode attention: sequence b's query is q[rows[b]] ([H, D]; rows defaults to 0..B-1),
    attending to its first ctx_lens[b] >= 1 cached tokens. Writes out[rows[b]] (out defaults to
    a new tensor like q) and returns out. page_table [B, max_pages] and ctx_lens [B] are int32."""
    _require_triton()
    _check_pool(q, k_cache, v_cache)
    B = ctx_lens.shape[0]
    H, D = q.shape[1], q.shape[2]
    kv_heads, _, page_size, _ = k_cache.shape
    group = H // kv_heads
    rows = torch.arange(B, dtype=torch.int32, device=q.device) if rows is None else rows
    out = torch.empty_like(q) if out is None else out
    assert out.shape == q.shape and out.stride(-1) == 1
    assert page_table.dtype == torch.int32 and ctx_lens.dtype == torch.int32 and page_table.stride(1) == 1
    if B == 0:
        return out
    scale = D ** -0.5 if scale is None else scale
    _decode_kernel[(B, kv_heads)](
        q, k_cache, v_cache, out, page_table, ctx_lens, rows,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), page_table.stride(0),
        scale * _LOG2E,
        GROUP=group, HEAD_DIM=D, PAGE_SIZE=page_size,
        # tl.dot needs every tile side >= 16 on GPUs.
        BLOCK_G=max(16, _next_pow2(group)), BLOCK_D=max(16, _next_pow2(D)), BLOCK_N=max(16, block_n),
        PRECISION=_precision(q.dtype), UPCAST=_interpreted(),
    )
    return out


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            page_table: torch.Tensor, q_starts: torch.Tensor, q_lens: torch.Tensor,
                            ctx_lens: torch.Tensor, max_q_len: int, out: torch.Tensor | None = None,
                            scale: float | None = None, block_m: int = 16, block_n: int = 32) -> torch.Tensor:
    """Prefill attention over S segments of q [T, H, D] (see paged_prefill_attention_reference);
    metadata tensors are int32, max_q_len = max(q_lens). Writes the segments' rows of `out` and
    returns it."""
    _require_triton()
    _check_pool(q, k_cache, v_cache)
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
    _prefill_kernel[grid](
        q, k_cache, v_cache, out, page_table, q_starts, q_lens, ctx_lens,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), page_table.stride(0),
        scale * _LOG2E,
        GROUP=H // kv_heads, HEAD_DIM=D, PAGE_SIZE=page_size,
        BLOCK_M=max(16, block_m), BLOCK_D=max(16, _next_pow2(D)), BLOCK_N=max(16, block_n),
        PRECISION=_precision(q.dtype), UPCAST=_interpreted(),
    )
    return out
