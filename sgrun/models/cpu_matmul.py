"""Small-batch weight-only matmuls on the CPU: a C++ kernel (cpu_matmul.cpp) built on first use.

Why our own kernel: at decode batch sizes the step reads every weight once per row block, so the
kernel's job is to turn int4 codes into dot products as fast as memory delivers them. torch's
`_weight_int4pack_mm_for_cpu` took 9 ms of a 16 ms batch-1 step for SmolLM2 (2.3 ms of weight
bytes at the measured bandwidth) and its cost grows almost linearly with the rows, which is what
made speculative verification gain little on int4. This kernel decodes 32 codes with four
integer ops into bf16 pairs and multiplies them with AVX512-BF16 dot products (16 output columns
per instruction, one fma per group for the scale), ~2x faster than torch's kernel from 1 to 64
rows and level with oneDNN's dense bf16 GEMM at 64 rows, without materialising the weight.

Every row is computed by the same instruction sequence whatever the row count (no split-K, fixed
accumulation order), so a row's output is bit-identical alone or in a batch: speculative verify
rows see exactly the numbers a decode would.

The ops are registered with the dispatcher (`torch.ops.sgrun.int4_mm`, `.bf16_mm`) with fake
implementations, so torch.compile'd graphs call them without a graph break. The kernel needs
AVX512-BF16; elsewhere (or where the build fails) `available()` is False and callers keep
torch's kernels.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sgrun.models.cpp_build import CppKernel, cpu_flags

LANES = 16      # output columns per block (one 512-bit lane each)
GROUP = 32      # int4 group along the input dim

FORCE_BUILD_FAILURE_ENV = "SGRUN_CPP_MATMUL_FAIL"

KERNEL = CppKernel("cpu_matmul", Path(__file__).with_name("cpu_matmul.cpp"), ["fast_path", "int4_dequantize_t", "bf16_unpack_t"],
                   what="The C++ small-batch matmul",
                   fallback="small batches use torch's weight-only kernels instead",
                   fail_env=FORCE_BUILD_FAILURE_ENV)

_fakes_registered = False


def available() -> bool:
    """True where the kernel built and this CPU has AVX512-BF16 (the ops are then registered)."""
    global _fakes_registered
    module = KERNEL.load()
    if module is None or not module.fast_path():
        return False
    if not _fakes_registered:
        _register_fakes()
        _fakes_registered = True
    return True


def _register_fakes() -> None:
    @torch.library.register_fake("sgrun::int4_mm")
    def _int4_mm_fake(x, codes, scales, n):
        return x.new_empty((x.shape[0], n))

    @torch.library.register_fake("sgrun::bf16_mm")
    def _bf16_mm_fake(x, w, n):
        return x.new_empty((x.shape[0], n))

    @torch.library.register_fake("sgrun::int8_mm_f32")
    def _int8_mm_f32_fake(x, q, scale):
        return x.new_empty((x.shape[0], scale.shape[0]))


def cpu_supported() -> bool:
    """This CPU has the instructions the kernel is written in (AVX512-BF16). Where it does,
    `available()` must hold too: a False there is a broken build, not a missing feature."""
    return "avx512_bf16" in cpu_flags().split()


def has_amx() -> bool:
    """AMX tiles make oneDNN's dense bf16 GEMM ~2x faster than weight-only kernels from ~64 rows."""
    return "amx_bf16" in cpu_flags().split()


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


def int8_rows(blocked: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Rows `ids` of the [N, K] matrix that pack_int8 blocked (an embedding lookup)."""
    return blocked[ids // LANES, :, ids % LANES]


def int8_mm_f32(x: torch.Tensor, blocked: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch.ops.sgrun.int8_mm_f32(x, blocked, scale)


def int4_mm(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, n: int) -> torch.Tensor:
    return torch.ops.sgrun.int4_mm(x, codes, scales, n)


def int4_dequantize(codes: torch.Tensor, scales: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """The packed weight as a dense [N, K] bf16 matrix (for prefill chunks): a transposed view of
    a [K, N] buffer, which is how the kernel writes it fastest; F.linear takes it as it is."""
    module = KERNEL.load()
    assert module is not None, "int4_dequantize called without the kernel"
    return module.int4_dequantize_t(codes, scales, n, k).t()


def pack_bf16(w: torch.Tensor) -> torch.Tensor:
    """bf16 [N, K] -> [N/16, K/2, 16, 2]: per column block and input pair, 16 (even, odd) pairs."""
    n, k = w.shape
    return w.view(n // LANES, LANES, k // 2, 2).permute(0, 2, 1, 3).contiguous()


def bf16_mm(x: torch.Tensor, packed: torch.Tensor, n: int) -> torch.Tensor:
    return torch.ops.sgrun.bf16_mm(x, packed, n)


def bf16_unpack(packed: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """The packed weight as [N, K] (a transposed view of a [K, N] buffer, as int4_dequantize)."""
    module = KERNEL.load()
    assert module is not None, "bf16_unpack called without the kernel"
    return module.bf16_unpack_t(packed, n, k).t()
