"""Start-up choice of the attention backend: pure torch on CPU, the Triton kernels on CUDA."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sgrun.engine.attention import TorchPagedAttention
from sgrun.engine.page_pool import PagePool

if TYPE_CHECKING:
    from sgrun.engine.attention_triton import TritonPagedAttention


def make_attention_backend(pool: PagePool, num_heads: int, num_kv_heads: int, head_dim: int,
                           device: str | torch.device | None = None) -> TorchPagedAttention | TritonPagedAttention:
    """The backend for tensors on `device` (default: where the pool lives). The Triton backend is
    imported only here, so CPU runs never import triton."""
    device = torch.device(device) if device is not None else pool.k[0].device
    if device.type == "cuda":
        from sgrun.engine.attention_triton import TritonPagedAttention
        return TritonPagedAttention(pool, num_heads, num_kv_heads, head_dim)
    return TorchPagedAttention(pool, num_heads, num_kv_heads, head_dim)
