"""Small-batch weight-only matmuls on the CPU: C++ tiles for every CPU level, built on first use.

Why our own kernel: at decode batch sizes the step reads every weight once per row block, so the
kernel's job is to turn int4 codes into dot products as fast as memory delivers them. torch's
`_weight_int4pack_mm_for_cpu` took 9 ms of a 16 ms batch-1 step for SmolLM2 (2.3 ms of weight
bytes at the measured bandwidth) and its cost grows almost linearly with the rows.

Per level (isa.py; the C++ sources: matmul.cpp drives, one file per ISA holds the tiles):
- avx512_bf16 / amx: bf16 activations x int4 codes decoded to bf16 pairs with AVX512-BF16 dot
  products (16 columns per instruction, one fma per group for the scale), and dense bf16 alike;
- avx2, avx512, neon, neon_dotprod (and float32 activations at every level): activations
  quantized to int8 per group of 32, integer dot products with the int4 codes (as llama.cpp
  does: _mm256_maddubs_epi16 on AVX2, SDOT / widening multiplies on NEON), scale and minimum
  applied per group in float32; dense bf16 and the int8 lm_head (float32 activations) by FMA.
The weight layout is the same at every level, so packing is shared.

Every row is computed by the same instruction sequence whatever the row count (no split-K, fixed
accumulation order), so a row's output is bit-identical alone or in a batch: speculative verify
rows see exactly the numbers a decode would.

The ops are registered with the dispatcher as `torch.ops.sgrun.<op>_<level>` with fake
implementations, so torch.compile'd graphs call them without a graph break. `kernels()` gives the
active level's ops, or None where the level has no tiles (scalar) or the build failed: callers
then keep torch's kernels.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from sgrun.kernels.cpu import isa
from sgrun.kernels.cpu.build import CppKernel

LANES = 16      # output columns per block
GROUP = 32      # the group along the input dim: int4's scale and minimum, int8's scale

FORCE_BUILD_FAILURE_ENV = "SGRUN_CPP_MATMUL_FAIL"

_HERE = Path(__file__).parent
# One translation unit: shared helpers, then every ISA's tiles (each compiles only under its own
# level's flags), then the torch driver. A new ISA is one more file in this list.
SOURCES = ("thread_team.cpp", "matmul_common.cpp", "matmul_avx512_bf16.cpp", "matmul_avx512_vnni.cpp", "amx_tiles.cpp", "matmul_amx.cpp",
           "matmul_avx2.cpp", "matmul_neon.cpp", "matmul_panel.cpp", "matmul.cpp",
           "decode_layer_abi.cpp", "decode_block.cpp")

KERNEL = CppKernel("matmul", tuple(_HERE / s for s in SOURCES),
                   ["fast_path", "tiles", "set_amx", "amx_active", "amx_calls", "set_panel", "panel_calls", "int4_dequantize_t", "bf16_unpack_t",
                    "int8_table_rows", "decode_block_new", "decode_block_configure", "decode_block_moe", "decode_block_run", "decode_block_free", "decode_forward",
                    "decode_tables_new", "decode_logits", "weight_prefetch_bytes",
                    "team_parallel_address"],
                   what="The C++ small-batch matmul",
                   fallback="small batches use torch's weight-only kernels instead",
                   fail_env=FORCE_BUILD_FAILURE_ENV)

# Rows up to which the kernels serve before dequantize + the dense GEMM (benchmarks/bench_matmul.py):
# AMX tiles make oneDNN's dense GEMM win from ~48 rows. Without AMX the bf16-dot tiles serve every
# row count: the GEMM rounds the dequantized weights to bf16 and the tiles do not, so a split at 256
# rows made a prompt's greedy output change when it was prefilled in a batch of three (315 rows)
# rather than alone (105), on an AMD EPYC (Zen 5, AVX512-BF16, 2 December 2026); and TTFT of 2,048
# tokens measured the same either way there (1.13-1.46 s with the GEMM, 1.15-1.33 s with the tiles,
# alternated in fresh processes).
# The int8-activation tiles serve every row count: they round the activations to 8 bits, the
# dense GEMM does not, so a split at some row count made a prompt's logits depend on how it was
# chunked (after a cached prefix the short suffix took the tiles, the whole prompt the GEMM:
# greedy outputs changed with the cache on an AVX2-only AMD EPYC). Measured there, the tiles
# are also the faster: TTFT of 2,048 tokens 6.39 s against 6.69 s with the GEMM past 64 rows
# (the 64-row crossover had been measured against MKL's AVX-512 GEMM).
# (Dense bf16 weights at the levels without bf16 dot products run exact FMA tiles, no rounding of
# the activations, so they keep the speed crossover: 64 rows, measured against MKL's AVX-512 GEMM.
# At avx2 torch's bf16 GEMM has no native path and the tiles serve every row count: on an
# AVX2-only AMD EPYC Zen 3, gate_up 3072x576 at 256 rows took 920 ms in F.linear bf16
# against 9.9 ms in the tiles, and 64-256 rows of every SmolLM2 shape 20-100x slower
# (`python benchmarks/bench_matmul.py --rows 64,128,256`, 3 December 2026); one test's dense bf16
# prefills took 213 s of the suite.)
MAX_ROWS = {"amx": 48, "avx512_bf16": 1 << 30}
Q8_MAX_ROWS = 1 << 30
DENSE_FMA_MAX_ROWS = 64
DENSE_FMA_EVERY_ROW_LEVELS = ("avx2",)   # measured there; neon not measured (no ARM machine here)


@dataclass(frozen=True)
class MatmulKernels:
    """The ops one level's build provides."""
    level: str                         # the level whose build this is
    bf16_dot: bool                     # bf16 activations use the AVX512-BF16 tiles
    module: object

    @property
    def int4_dtypes(self) -> tuple[torch.dtype, ...]:
        return (torch.bfloat16, torch.float32)

    def max_rows(self, dtype: torch.dtype, dense: bool = False) -> int:
        """Rows up to which the kernel serves these activations (past them, dequantize + dense GEMM);
        `dense`: for a dense bf16 weight rather than int4 codes."""
        if self.bf16_dot and dtype == torch.bfloat16:
            return MAX_ROWS["amx" if isa.active_level().name == "amx" else "avx512_bf16"]
        if dense and self.level in DENSE_FMA_EVERY_ROW_LEVELS:
            return Q8_MAX_ROWS
        return DENSE_FMA_MAX_ROWS if dense else Q8_MAX_ROWS

    @property
    def amx_prefill(self) -> bool:
        """Float32 activations of 256 rows and more run on AMX-INT8 tiles (matmul_amx.cpp)."""
        return bool(self.module.amx_active())

    def _op(self, name: str):
        return getattr(torch.ops.sgrun, f"{name}_{self.level}")

    def int4_mm(self, x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, n: int) -> torch.Tensor:
        return self._op("int4_mm")(x, codes, scales, n)

    def bf16_mm(self, x: torch.Tensor, packed: torch.Tensor, n: int) -> torch.Tensor:
        return self._op("bf16_mm")(x, packed, n)

    def int8_mm_f32(self, x: torch.Tensor, blocked: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self._op("int8_mm_f32")(x, blocked, scale)

    def int8_rows(self, blocked: torch.Tensor, scale: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` of the int8 table in int8_mm_f32's layout, dequantized to float32 (an
        embedding lookup; decode_logits does the same lookup inside its one call)."""
        return self.module.int8_table_rows(blocked, scale, ids)

    def int4_dequantize(self, codes: torch.Tensor, scales: torch.Tensor, n: int, k: int,
                        dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """The packed weight as a dense [N, K] matrix in `dtype` (for prefill chunks): a transposed
        view of a [K, N] buffer, which is how the kernel writes it fastest; F.linear takes it as it is."""
        return self.module.int4_dequantize_t(codes, scales, n, k, dtype == torch.float32).t()

    def bf16_unpack(self, packed: torch.Tensor, n: int, k: int) -> torch.Tensor:
        """The packed weight as [N, K] (a transposed view of a [K, N] buffer, as int4_dequantize)."""
        return self.module.bf16_unpack_t(packed, n, k).t()


def kernels(level: isa.Level | str | None = None) -> MatmulKernels | None:
    """The ops for `level` (default: the active level), or None where it has no tiles or the build failed."""
    built = isa.build_level(isa.resolve(level))
    if not has_tiles(built):
        return None
    module = KERNEL.load(built)
    if module is None or not module.fast_path():
        return None
    # amx shares avx512_bf16's build: in a process at the amx level its prefill-sized float32
    # matmuls take the AMX-INT8 tiles (matmul_amx.cpp) where the CPU allows them, with the same
    # output bits. Read from the process's level, not `level`: a cached model's linears come back
    # through kernels(<their build's name>), i.e. "avx512_bf16" (model_cache.py).
    module.set_amx(isa.active_level().name == "amx")
    _register_fakes(built.name)
    return MatmulKernels(built.name, "bf16dot" in module.tiles().split(), module)


def has_tiles(level: isa.Level | str | None = None) -> bool:
    """The level has matmul tiles written for it (every level but scalar). Where it does and the CPU
    runs it, `kernels()` must give them: a None there is a broken build, not a missing feature."""
    return isa.build_level(isa.resolve(level)).name != "scalar"


def available(level: isa.Level | str | None = None) -> bool:
    return kernels(level) is not None


@functools.cache
def _register_fakes(level: str) -> None:
    @torch.library.register_fake(f"sgrun::int4_mm_{level}")
    def _int4_mm_fake(x, codes, scales, n):
        return x.new_empty((x.shape[0], n))

    @torch.library.register_fake(f"sgrun::bf16_mm_{level}")
    def _bf16_mm_fake(x, w, n):
        return x.new_empty((x.shape[0], n))

    @torch.library.register_fake(f"sgrun::int8_mm_f32_{level}")
    def _int8_mm_f32_fake(x, q, scale):
        return x.new_empty((x.shape[0], scale.shape[0] * LANES))


def fits(n: int, k: int) -> bool:
    """Shapes the int4 column-block layout holds (bf16 needs only n % 16 and an even k)."""
    return n % LANES == 0 and k % GROUP == 0


def pack_int4(codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """codes [N, K] in 0..15, scale and minimum [N, K / 32] (w = scale * code + minimum) ->
    (codes [N/16, K/2, 16] uint8, two per byte: low nibble = even k; scales [N/16, K/32, 2, 16]
    fp16: the block's 16 scales, then its 16 minimums)."""
    n, k = codes.shape
    pairs = codes.to(torch.uint8).view(n // LANES, LANES, k // 2, 2)
    packed = (pairs[..., 0] | (pairs[..., 1] << 4)).permute(0, 2, 1).contiguous()
    g = k // GROUP
    sm = torch.stack([scale.reshape(n // LANES, LANES, g), minimum.reshape(n // LANES, LANES, g)], dim=2)
    return packed, sm.permute(0, 3, 2, 1).contiguous().to(torch.float16)


def pack_int8(q: torch.Tensor) -> torch.Tensor:
    """int8 [N, K] -> [N/16, K, 16]: 16 output columns of one k side by side."""
    n, k = q.shape
    return q.view(n // LANES, LANES, k).transpose(1, 2).contiguous()


def pack_int8_scales(scale: torch.Tensor) -> torch.Tensor:
    """[N, groups] (one scale per column and group of 32 k, fp16 values) -> [N/16, groups, 16] fp16."""
    n, groups = scale.shape
    return scale.to(torch.float16).view(n // LANES, LANES, groups).transpose(1, 2).contiguous()


def pack_bf16(w: torch.Tensor) -> torch.Tensor:
    """bf16 [N, K] -> [N/16, K/2, 16, 2]: per column block and input pair, 16 (even, odd) pairs."""
    n, k = w.shape
    return w.view(n // LANES, LANES, k // 2, 2).permute(0, 2, 1, 3).contiguous()
