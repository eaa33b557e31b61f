"""What every Triton kernel here shares: the optional triton import, tile-size and precision
choices, interpreter detection and the pool-shape checks.

Importing this module never needs triton; `require_triton()` raises the install hint instead.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs without triton: the references and the torch backend still work
    triton = None
    tl = None

LOG2E = 1.4426950408889634


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def tile(n: int) -> int:
    """A tl.dot tile side covering n: a power of two, at least 16 (the GPU minimum)."""
    return max(16, next_pow2(n))


def require_triton() -> None:
    if triton is None:
        raise RuntimeError("the Triton kernels need triton: pip install 'sgrun[gpu]'; "
                           "on CPU the engine uses the torch backend")


def check_pool(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    assert q.dim() == 3 and q.stride(-1) == 1, "q must be [T, H, D] with unit stride on D"
    assert k_cache.dim() == 4 and k_cache.shape == v_cache.shape, "pool tensors are [KV, N, page_size, D]"
    assert k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    assert q.shape[1] % k_cache.shape[0] == 0, "query heads must be a multiple of KV heads"
    assert q.shape[2] == k_cache.shape[3] and q.dtype == k_cache.dtype == v_cache.dtype


def interpreted(kernel) -> bool:
    # TRITON_INTERPRET is read when a kernel is decorated, so ask the kernel, not the environment.
    return type(kernel).__name__ == "InterpretedFunction"


def precision(dtype: torch.dtype) -> str:
    # TF32 would cost fp32 inputs ~3 decimal digits; half types ignore the setting.
    return "ieee" if dtype == torch.float32 else "tf32"


if triton is not None:

    @triton.jit
    def dot(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
        # Triton's CPU interpreter (3.x) multiplies bf16 tiles as raw uint16 bits; under it the
        # operands go through fp32 instead (values already rounded to the input dtype).
        if UPCAST:
            r = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        else:
            r = tl.dot(a, b, input_precision=PRECISION)
        return r
