"""The start-up choice of attention backend: the C++ in-place kernel, else pure torch, on the
CPU; the Triton kernels on CUDA. The backends are imported only here, and only the chosen one,
so torch-only runs never import triton.

Every backend is then configured with the model's softmax scale and per-layer sliding windows
(`configure(scale, windows)`). A backend that cannot apply windows refuses them; where the default
C++ backend refuses, the model runs on the torch backend (logged), never attending globally.
"""

from __future__ import annotations

import logging

import torch

from sgrun.engine.parts.attention.backend import AttentionBackend
from sgrun.engine.state.page_pool import PagePool
from sgrun.errors import InvalidRequestError


BACKENDS = ("cpp", "torch", "triton")
log = logging.getLogger("sgrun.engine")


def default_backend(device: torch.device) -> str:
    return "triton" if device.type == "cuda" else "cpp"


def make_attention_backend(pool: PagePool, num_heads: int, num_kv_heads: int, head_dim: int,
                           backend: str | None = None, cascade: bool = True,
                           query_dtype: torch.dtype | None = None, scale: float | None = None,
                           windows: list[int | None] | None = None) -> AttentionBackend:
    """The backend (`_make_backend`) configured with `scale` (default 1/sqrt(head_dim)) and the
    per-layer `windows` (default: every layer global)."""
    scale = head_dim ** -0.5 if scale is None else scale
    windows = [None] * len(pool.k) if windows is None else list(windows)
    attn = _make_backend(pool, num_heads, num_kv_heads, head_dim, backend, cascade, query_dtype)
    try:
        attn.configure(scale, windows)
    except ValueError as exc:   # this backend's kernels cannot apply the windows
        if (backend or default_backend(pool.k[0].device)) != "cpp":
            raise InvalidRequestError(f"attention_backend {backend!r} cannot run this model: {exc}",
                                      field="attention_backend") from exc
        log.info("attention: %s; the model's sliding windows run on the torch backend", exc)
        attn = _make_backend(pool, num_heads, num_kv_heads, head_dim, "torch", cascade, query_dtype)
        attn.configure(scale, windows)
    return attn


def _make_backend(pool: PagePool, num_heads: int, num_kv_heads: int, head_dim: int,
                  backend: str | None, cascade: bool, query_dtype: torch.dtype | None) -> AttentionBackend:
    """`backend`: "cpp", "torch" or "triton" (default: Triton on CUDA, cpp elsewhere).
    "cpp" decodes with the C++ kernel that reads the pages in place (built on first use) and,
    with `cascade`, attends prefixes shared by several decoding requests once; with a bf16 or float32
    pool (or a float16 one under float32 queries) at a CPU level with AVX2, AVX512-BF16 or NEON its
    prefill chunks take the C++ prefill kernel, else SDPA. Where the kernel
    cannot be built it falls back to "torch" (logged once), whose decodes gather the pages.
    `query_dtype`: the model's (default the pool's; float32 over a bf16 or float16 pool where
    kv_cache_dtype narrows it). Triton on a CPU pool runs the kernels through Triton's interpreter
    (TRITON_INTERPRET=1):
    slow, and how the tests prove the Triton path without a GPU. Backends are imported only
    here, so torch-only runs never import triton."""
    device = pool.k[0].device
    backend = backend or default_backend(device)
    if backend == "triton":
        from sgrun.engine.parts.attention.triton_backend import TritonPagedAttention
        return TritonPagedAttention(pool, num_heads, num_kv_heads, head_dim)
    if backend == "cpp":
        if device.type != "cpu":
            raise InvalidRequestError(f"attention_backend 'cpp' runs on the CPU; the pool is on {device} "
                                      "(use 'triton' or 'torch' there)", field="attention_backend")
        from sgrun.kernels.cpu.paged_decode import load_kernel
        op = load_kernel()
        if op is not None:
            from sgrun.engine.parts.attention.cpp_backend import CppPagedAttention
            from sgrun.kernels.cpu.prefill_attention import bf16_from, prefill_kernel_for
            return CppPagedAttention(pool, num_heads, num_kv_heads, head_dim, op, cascade=cascade,
                                     prefill_op=prefill_kernel_for(pool.k[0].dtype, head_dim, query_dtype),
                                     prefill_bf16_from=bf16_from())
        backend = "torch"
    if backend == "torch":
        from sgrun.engine.parts.attention.torch_backend import TorchPagedAttention
        return TorchPagedAttention(pool, num_heads, num_kv_heads, head_dim)
    raise InvalidRequestError(f"attention_backend must be one of {', '.join(BACKENDS)}; got {backend!r}",
                              field="attention_backend")
