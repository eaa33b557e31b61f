"""KV write in Triton: the new tokens' K and V ([T, KV, D], strided views of the fused qkv
projection) stored into their pool slots in one launch per layer, instead of two index_put
scatters. Reference: `attention_reference.write_kv_reference`."""

from __future__ import annotations

import torch

from sgrun.kernels.triton.launch import next_pow2, require_triton, tl, triton

if triton is not None:

    @triton.jit
    def _write_kv_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, pages_ptr, offsets_ptr,
                         stride_kt, stride_kh, stride_vt, stride_vh,
                         stride_ch, stride_cp, stride_cs,
                         HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
        # One program per (token, KV head): one row of D values for K and one for V.
        t = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1).to(tl.int64)
        page = tl.load(pages_ptr + t).to(tl.int64)
        slot = tl.load(offsets_ptr + t).to(tl.int64)
        d = tl.arange(0, BLOCK_D)
        mask = d < HEAD_DIM
        dst = h * stride_ch + page * stride_cp + slot * stride_cs + d
        k = tl.load(k_ptr + t * stride_kt + h * stride_kh + d, mask=mask)
        v = tl.load(v_ptr + t * stride_vt + h * stride_vh + d, mask=mask)
        tl.store(k_cache_ptr + dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             pages: torch.Tensor, offsets: torch.Tensor) -> None:
    """In place: token t's K/V go to slot offsets[t] of page pages[t] (1-D integer tensors on the
    pool's device; the caches share one layout, [KV, N, page_size, D], unit stride on D)."""
    require_triton()
    T, kv_heads, D = k.shape
    assert v.shape == k.shape and k.stride(-1) == 1 and v.stride(-1) == 1
    assert k_cache.shape == v_cache.shape and k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1
    assert k_cache.shape[0] == kv_heads and k_cache.shape[3] == D
    if T == 0:
        return
    _write_kv_kernel[(T, kv_heads)](
        k, v, k_cache, v_cache, pages, offsets,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        HEAD_DIM=D, BLOCK_D=next_pow2(D),
    )
