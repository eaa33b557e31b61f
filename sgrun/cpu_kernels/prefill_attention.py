"""Causal prefill attention over the paged KV pool: a C++ kernel (prefill_attention.cpp) built on
first use through build.py, for the prefill chunks (extend segments) of the CPU
backend (engine/attention_cpp.py).

Why not SDPA: torch's CPU flash attention reaches ~140 GFLOP/s in bf16 at SmolLM2's shape
(9 query heads, 3 kv heads, head dim 64), well below what the bf16 dot-product instruction
gives, and with earlier context in the pages (a chunked prefill, a radix-cache hit) it needs
the context gathered out of the pages and a materialized [q, ctx] mask. The kernel instead:
- packs each segment's context K and V once per layer, straight from the pages, into the
  layouts `_mm512_dpbf16ps` reads (16 keys side by side per pair of head dims for Q K^T; two
  consecutive keys interleaved for P V), zero-padded to a block of 64 keys;
- splits the queries into tiles of a few rows, each row a (position, query head) of ONE kv
  head's group, so every packed K/V vector loaded serves the group's query heads together;
- walks each tile's keys in blocks of 64 with an online softmax (base 2, float32 scores and
  sums, probabilities rounded to bf16 for P V as flash attention does), stopping at the
  tile's last causal key, so blocks above the diagonal are never computed;
- spreads the tiles, longest contexts first, over torch's threads from a shared counter.
Its semantics are attention_torch.py's: the q_len new rows are the last positions of a
ctx_len-token context and attend every key up to their own position.

The AVX512-BF16 path exists where the compiler targets it (-march=native on a CPU with
avx512_bf16) and the head dim is 32, 64, 96 or 128; elsewhere `fast_path_available()` is False
and the backend keeps SDPA. A portable row-by-row path (any dtype, any head dim) is in the
same module; the tests compare both with a float64 reference.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import ModuleType

import torch

from sgrun.cpu_kernels import isa
from sgrun.cpu_kernels.build import CppKernel

log = logging.getLogger("sgrun.engine")

# Tests set this to simulate a machine where the build fails.
FORCE_BUILD_FAILURE_ENV = "SGRUN_CPP_PREFILL_FAIL"

KERNEL = CppKernel("prefill_attention", Path(__file__).with_name("prefill_attention.cpp"),
                   ["prefill_attention", "fast_path_available"], what="C++ prefill attention",
                   fallback="prefill chunks use torch's SDPA instead", fail_env=FORCE_BUILD_FAILURE_ENV)


def load_kernel(level: isa.Level | str | None = None) -> ModuleType | None:
    """The compiled module (`prefill_attention`, `fast_path_available`) for `level` (default: the
    active one), or None (logged once)."""
    return KERNEL.load(level)


# Head dims the AVX512-BF16 path is instantiated for (prefill_attention.cpp's dispatch).
FAST_HEAD_DIMS = (32, 64, 96, 128)
_no_fast_path_logged: list[bool] = []


def prefill_kernel_for(dtype: torch.dtype, head_dim: int) -> ModuleType | None:
    """The kernel module where its fast path applies (a bf16 pool, a supported head dim, a CPU
    and compiler with AVX512-BF16), else None: the backend then keeps SDPA, which beats the
    portable path. Only a bf16 pool triggers the build."""
    if dtype != torch.bfloat16 or head_dim not in FAST_HEAD_DIMS:
        return None
    op = load_kernel()
    if op is not None and not op.fast_path_available():
        if not _no_fast_path_logged:
            _no_fast_path_logged.append(True)
            log.info("C++ prefill attention has no AVX512-BF16 path on this CPU; prefill chunks use SDPA")
        return None
    return op
