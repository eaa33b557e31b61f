"""Causal and sliding-window prefill attention over the paged KV pool: a C++ kernel (prefill_attention.cpp) built on
first use through build.py, for the prefill chunks (extend segments) of the CPU
backend (engine/parts/attention/cpp_backend.py).

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
  tile's last causal key, so blocks above the diagonal are never computed, and under a sliding
  window (Gemma 3's local layers: `window` > 0, the row at position p attends keys j with
  p - window < j <= p) starting at the block of the tile's earliest window start, so blocks
  before every row's window are never computed either and a windowed layer costs the window, not
  the prompt (a chunk after a long cached prefix packs only from its first row's window on);
- spreads the tiles, longest contexts first, over torch's threads from a shared counter.
Its semantics are attention/torch_backend.py's: the q_len new rows are the last positions of a
ctx_len-token context and attend every key up to their own position (from the window's start
under a window). Every path takes the window: `prefill_attention(..., amx, window)`, 0 causal.

Under a float32 model the pool may hold float16 or bf16 (kv_cache_dtype, engine/parts/device.py): every
path widens the keys and values exactly as it packs them (F16C / FCVTL / a shift), so products and
sums stay float32 and a row gets what a float32 pool of the same values gives it.

Vector paths, one file each (the driver, prefill_attention.cpp, takes the best its level has):
- AMX (amx): the AVX512-BF16 path's packing, walk and softmax with its two products (Q K^T and
  P V) on AMX tiles, 16 query rows per tile (prefill_attention_amx.cpp, built into the avx512_bf16
  build and run where `use_amx` says so: the level is amx and the kernel granted the tile state).
  One layer of a 2,048-token prefill at SmolLM2's shape: 31.7 -> 7.5 ms (docs/cpu_kernels.md);
- AVX512-BF16 (avx512_bf16, amx; bf16 and float32 pools, head dims 32, 64, 96, 128): the layouts
  above, in prefill_attention_avx512_bf16.cpp. A float32 pool's rows at positions >= BF16_FROM
  take it too, their Q, K and V rounded to bf16 as they are packed, scores, sums and output in
  float32 (twice the float32 FMA path's speed there); its earlier rows keep the AVX2 path's float32
  products, so a prompt shorter than BF16_FROM comes out bit for bit as before
  (docs/cpu_kernels.md has the measurements and the reason);
- AVX2 + FMA (avx2, avx512, and other head dims at avx512_bf16; bf16 and float32
  pools, head dims a multiple of 16 up to 256): K packed as float32 with 16 keys side by side per
  head dim, V as float32 rows, 6 x 16 FMA register blocks for Q K^T and P V, all in float32
  (prefill_attention_avx2.cpp);
- NEON (neon, neon_dotprod): the same layouts and tiles on 128-bit vectors (prefill_attention_neon.cpp).
Where no path applies (the scalar level, another dtype or head dim) `fast_path()` is "" and the
backend keeps SDPA. A portable row-by-row path (any dtype, any head dim) is in the same module;
the tests compare every path with a float64 reference at every CPU level the machine runs.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import ModuleType

import torch

from sgrun.kernels.cpu import isa
from sgrun.kernels.cpu.build import CppKernel
from sgrun.kernels.cpu.pool_dtypes import pool_dtypes_under

log = logging.getLogger("sgrun.engine")

# Tests set this to simulate a machine where the build fails.
FORCE_BUILD_FAILURE_ENV = "SGRUN_CPP_PREFILL_FAIL"

# On the AVX512-BF16 path, a float32 pool's query rows at this position and later take bf16
# products; earlier rows keep float32 ones. Why a position: attention is a small part of a short
# prefill (~10% at 512 tokens) and most of a long one (a third at 2,048 on Zen 4), so short prompts
# keep float32 bits at little cost, and a row's path depends on its position alone (chunked = whole).
# SGRUN_PREFILL_BF16_FROM sets it (0: every row; a huge number: none).
BF16_FROM_ENV = "SGRUN_PREFILL_BF16_FROM"
BF16_FROM_DEFAULT = 1024


def bf16_from() -> int:
    """The first position whose row takes bf16 products on a float32 pool (BF16_FROM_ENV, else the default)."""
    raw = os.environ.get(BF16_FROM_ENV, "").strip()
    if not raw:
        return BF16_FROM_DEFAULT
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{BF16_FROM_ENV} must be a whole number of tokens (0 or more), got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{BF16_FROM_ENV} must be 0 or more, got {value}")
    return value

_HERE = Path(__file__).parent
# One translation unit: the shared walk, every ISA's path (each compiles only under its own
# level's flags), then the torch driver. A new ISA is one more file in this list.
SOURCES = ("prefill_attention_common.cpp", "prefill_attention_avx512_bf16.cpp", "amx_tiles.cpp",
           "prefill_attention_amx.cpp", "prefill_attention_avx2.cpp", "prefill_attention_neon.cpp",
           "prefill_attention.cpp")

KERNEL = CppKernel("prefill_attention", tuple(_HERE / s for s in SOURCES),
                   ["prefill_attention", "fast_path_available", "fast_path", "amx_ready"], what="C++ prefill attention",
                   fallback="prefill chunks use torch's SDPA instead", fail_env=FORCE_BUILD_FAILURE_ENV)


def load_kernel(level: isa.Level | str | None = None) -> ModuleType | None:
    """The compiled module (`prefill_attention`, `fast_path_available`, `fast_path`) for `level`
    (default: the active one), or None (logged once)."""
    return KERNEL.load(level)


# Model (query) dtypes a vector path exists for, over the pools pool_dtypes.py allows under them
# (which head dims: the module's `fast_path`).
FAST_DTYPES = (torch.bfloat16, torch.float32)
_no_fast_path_logged: set[tuple[str, int]] = set()


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def use_amx(op: ModuleType | None) -> bool:
    """Whether `op`'s AVX512-BF16 path runs its products on AMX tiles: at the amx level (a forced
    lower level keeps its own path), where the CPU has the tiles and the kernel lets this process
    use them (`amx_ready`, asked once)."""
    return op is not None and isa.active_level().name == "amx" and bool(op.amx_ready())


def prefill_kernel_for(dtype: torch.dtype, head_dim: int, query_dtype: torch.dtype | None = None) -> ModuleType | None:
    """The kernel module where a vector path applies (a bf16 or float32 pool, or a float16 one under
    float32 queries: `query_dtype`, the model's, default the pool's; a head dim the path takes; a CPU
    level with AVX2, AVX512-BF16 or NEON), else None: the backend then keeps SDPA, which beats the
    portable path. Only those pools trigger the build."""
    query_dtype = query_dtype or dtype
    if query_dtype not in FAST_DTYPES or dtype not in pool_dtypes_under(query_dtype):
        return None
    op = load_kernel()
    if op is not None and not op.fast_path(dtype_name(dtype), head_dim):
        if (dtype_name(dtype), head_dim) not in _no_fast_path_logged:
            _no_fast_path_logged.add((dtype_name(dtype), head_dim))
            log.info("C++ prefill attention has no vector path for %s heads of %d at CPU level %s; "
                     "prefill chunks use SDPA", dtype_name(dtype), head_dim, isa.active_level().name)
        return None
    return op
