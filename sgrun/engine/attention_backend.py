"""The attention-backend seam: the batch-metadata type, the protocol every backend implements,
and the start-up choice between them (the C++ in-place kernel, else pure torch, on the CPU;
the Triton kernels on CUDA).

A backend is prepared once per batch with the batch's metadata (where the new tokens' K/V go,
and one Segment per scheduled request), then called once per layer to write the new K/V into
the paged pool and attend over each request's whole context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from sgrun.engine.page_pool import PagePool
from sgrun.errors import InvalidRequestError


@dataclass
class Segment:
    """One scheduled request in a batch: `q_len` new tokens attending to its whole context
    (cached + new tokens, `ctx_len`) held in the pages `pages`."""
    q_start: int          # first row of this segment in the flat batch
    q_len: int
    ctx_len: int          # context length after this step (cached + new tokens)
    pages: torch.Tensor   # [ceil(ctx_len / page_size)] page ids of the whole context


class AttentionBackend(Protocol):
    pool: PagePool

    def prepare(self, write_pages: torch.Tensor, write_offsets: torch.Tensor, segments: list[Segment]) -> None:
        """Precompute per-batch metadata once; every layer reuses it. The new tokens' K/V go to
        (write_pages[i], write_offsets[i]) in batch row order."""

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [T, H, D], k/v: [T, KV, D] for the new tokens of layer `layer`. Returns [T, H, D]."""


BACKENDS = ("cpp", "torch", "triton")


def default_backend(device: torch.device) -> str:
    return "triton" if device.type == "cuda" else "cpp"


def make_attention_backend(pool: PagePool, num_heads: int, num_kv_heads: int, head_dim: int,
                           backend: str | None = None, cascade: bool = True) -> AttentionBackend:
    """`backend`: "cpp", "torch" or "triton" (default: Triton on CUDA, cpp elsewhere).
    "cpp" decodes with the C++ kernel that reads the pages in place (built on first use) and,
    with `cascade`, attends prefixes shared by several decoding requests once; with a bf16 pool
    on a CPU with avx512_bf16 its prefill chunks take the C++ prefill kernel, else SDPA. Where the kernel
    cannot be built it falls back to "torch" (logged once), whose decodes gather the pages.
    Triton on a CPU pool runs the kernels through Triton's interpreter (TRITON_INTERPRET=1):
    slow, and how the tests prove the Triton path without a GPU. Backends are imported only
    here, so torch-only runs never import triton."""
    device = pool.k[0].device
    backend = backend or default_backend(device)
    if backend == "triton":
        from sgrun.engine.attention_triton import TritonPagedAttention
        return TritonPagedAttention(pool, num_heads, num_kv_heads, head_dim)
    if backend == "cpp":
        if device.type != "cpu":
            raise InvalidRequestError(f"attention_backend 'cpp' runs on the CPU; the pool is on {device} "
                                      "(use 'triton' or 'torch' there)", field="attention_backend")
        from sgrun.cpu_kernels.paged_decode import load_kernel
        op = load_kernel()
        if op is not None:
            from sgrun.engine.attention_cpp import CppPagedAttention
            from sgrun.cpu_kernels.prefill_attention import prefill_kernel_for
            return CppPagedAttention(pool, num_heads, num_kv_heads, head_dim, op, cascade=cascade,
                                     prefill_op=prefill_kernel_for(pool.k[0].dtype, head_dim))
        backend = "torch"
    if backend == "torch":
        from sgrun.engine.attention_torch import TorchPagedAttention
        return TorchPagedAttention(pool, num_heads, num_kv_heads, head_dim)
    raise InvalidRequestError(f"attention_backend must be one of {', '.join(BACKENDS)}; got {backend!r}",
                              field="attention_backend")
