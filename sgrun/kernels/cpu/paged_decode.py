"""Decode attention that reads the KV pages in place: a C++ kernel (paged_decode.cpp) built with
torch's extension mechanism (torch.utils.cpp_extension.load_inline) on first use, cached on disk.

`paged_decode` attends each decoding row's query heads over its context through its page
table, writing float32 outputs and log-sum-exps. The context is cut into chunks of
`chunk_tokens()` tokens at fixed positions; a chunk is walked in blocks of 16 tokens, each
block's keys and values used by every query head of the GQA group at once, with an online
softmax, and the chunks are folded left to right by log-sum-exp (paged_chunk_attention.cpp,
paged_decode.cpp). On a CPU with AVX512-BF16 and a bf16 pool, q.k runs on the bf16 keys with
dpbf16ps; at AVX2 and above (float32 pools, and bf16 without AVX512-BF16) hand-written AVX2,
and on aarch64 NEON, reads each key and value row once from its page for every head of the
group (paged_chunk_avx2.cpp, paged_chunk_neon.cpp); elsewhere (the scalar level) a portable
path converts each block to float32 (`decode_path` says which runs). The next blocks' rows
are prefetched across pages. Nothing is gathered, padded or masked.
Work items are (row, kv head) when there are enough of them, else (row, kv head, chunk) with the
fold afterwards, spread with at::parallel_for (torch's OpenMP pool: torch.set_num_threads
governs it); small problems run on the calling thread. Either way a row gets bitwise the same
result: it depends on its own query and context alone, not on the batch or the thread count.
`cascade_prefix` attends one shared prefix (whole chunks) for the stacked queries of every row
that shares it (one K/V read for all of them) and writes their state after it, onto which
`paged_decode` folds each row's own chunks: bitwise what the plain call gives.

Where the build fails (no compiler, no headers, a broken toolchain) `load_kernel` returns None
and says so once in the log; the caller then uses the gather path (attention/torch_backend.py).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from sgrun.kernels.cpu import isa
from sgrun.kernels.cpu.build import CppKernel

# Tests set this to simulate a machine where the build fails.
FORCE_BUILD_FAILURE_ENV = "SGRUN_CPP_ATTENTION_FAIL"

# The paged walk, then the per-chunk math, then the driver that uses them. -ffp-contract=off: no multiply-add is fused behind
# the code's back, so every query head runs the same instructions in any inlining context (the
# row invariance the kernel promises).
# The paged walk, each ISA's chunk path (compiled only under its own level's flags), the portable
# and AVX512-BF16 chunk math with the dispatch, the driver. A new ISA is one more file here.
SOURCES = ("paged_rows.cpp", "decode_layer_abi.cpp", "paged_chunk_avx2.cpp", "paged_chunk_neon.cpp", "paged_chunk_attention.cpp",
           "paged_decode.cpp")
KERNEL = CppKernel("paged_decode", tuple(Path(__file__).with_name(f) for f in SOURCES),
                   ["paged_decode", "paged_decode_window", "cascade_prefix", "chunk_tokens", "decode_path", "write_kv",
                    "decode_layer_address", "set_parallel", "parallel_address"], what="C++ paged decode attention",
                   fallback="decode attention gathers pages with the torch path instead",
                   fail_env=FORCE_BUILD_FAILURE_ENV, flags=("-ffp-contract=off",))


def load_kernel(level: isa.Level | str | None = None) -> ModuleType | None:
    """The compiled module (`paged_decode`, `cascade_prefix`, `chunk_tokens`, `decode_path`) for `level` (default:
    the active one), built on first use; None (logged once) where it cannot be built. Its attention
    items run on the matmul module's thread team of the same level where that module builds (the
    engine loads it anyway): one team per process, whose spinning worker joins a batch-1 layer's
    attention in well under a microsecond (paged_decode.cpp's for_items)."""
    module = KERNEL.load(level)
    if module is not None and not module.parallel_address():
        from sgrun.kernels.cpu import matmul
        tiles = matmul.KERNEL.load(level) if matmul.has_tiles(level) else None
        if tiles is not None:
            module.set_parallel(tiles.team_parallel_address())
    return module


def reset_for_tests() -> None:
    KERNEL.reset_for_tests()
