"""Linear layers whose weights stay quantized in memory (int8 per row, int4 in groups of 32).

Small batches (decode) multiply with weight-only kernels that read the int8/int4 weights
directly: sgrun's own C++ kernels for the CPU's level (kernels/cpu/matmul.py: ~2x torch's with
AVX512-BF16, int8 x int4 integer dot products on AVX2 and NEON; rows bit-identical at any batch
size), otherwise torch's CPU kernels. At batch 1 that is ~4-10x
faster than a bf16 `F.linear` on this model's shapes (measured 1 December 2026, c8e2c44), because the step is
bound by weight bytes and oneDNN's small-M bf16 path has a high fixed cost. Large batches
(prefill chunks) are compute-bound and the dense bf16 GEMM is as fast or faster there, so above a
kernel's `max_rows` the weight is dequantized for that one call and multiplied densely; the
dequantized copy is dropped after the call, so memory holds only the quantized form.
"""

from __future__ import annotations

import functools
from typing import Literal, Protocol

import torch
import torch.nn.functional as F

from sgrun.kernels.cpu import matmul as cpu_matmul

QuantMode = Literal["none", "int8", "int4"]
QUANT_MODES: tuple[str, ...] = ("none", "int8", "int4")

# Rows (tokens) up to which torch's weight-only kernels run; above it, dequantize + dense GEMM.
# Measured crossover on the 2-core AMX machine for SmolLM2's shapes is between 16 and 64 rows.
# sgrun's C++ kernels say their own (MatmulKernels.max_rows: per level and activation dtype).
KERNEL_MAX_ROWS = 48
# torch's int4 kernel (`_weight_int4pack_mm_for_cpu`, torch 2.13) with float32 activations costs
# ~20 ms per row for a 3072x576 weight on either ATen level of this machine, against ~6 ms for
# dequantize + F.linear at 2-20 rows (bf16 at ATen's avx2 level: 0.2 ms at 1 row, 3.7 ms at 20):
# a 20-token chunk after a cached prefix took 23 s in float32 (docs/benchmarks.md, "auto: the
# measurements behind the choice"). So with float32 activations only single rows take it.
TORCH_INT4_MAX_ROWS = {torch.float32: 1}
INT4_GROUP = 32
# Shapes the int4 linear takes: rows in multiples of 64 (what torch's packer needs at any level).
_INT4_ROW_TILE = 64


@functools.cache
def torch_int4_row_tile() -> int:
    """Rows per tile of _convert_weight_to_int4pack_for_cpu's layout, which follows ATen's CPU
    capability at run time: 64 at AVX-512, 32 at AVX2 (found on an AVX2-only AMD EPYC, where the
    assumed 64 dequantized the fallback's weights into garbage). Found by packing a probe."""
    probe = (torch.arange(64, dtype=torch.int32)[:, None] * 5 + torch.arange(32, dtype=torch.int32)) % 16
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(probe.contiguous(), 2)
    for tile in (64, 32, 16, 8):
        if torch.equal(_unpack_tiles(packed, 64, 32, tile).int(), probe):
            return tile
    raise RuntimeError("torch's int4 weight layout is not one sgrun knows (rows interleaved in tiles)")


class Linear(Protocol):
    out_features: int

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...

    def nbytes(self) -> int: ...


class DenseLinear:
    """A dense weight. bf16 on a CPU the C++ kernel serves: kept only in its column-block layout and
    multiplied by it up to `max_rows` rows (~2.5x oneDNN's bf16 path at 1-7 rows, rows invariant);
    larger chunks unpack it for oneDNN's GEMM, as the quantized linears dequantize."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        weight = weight.contiguous()
        self.bias = bias
        self.out_features, self.in_features = n, k = weight.shape
        fits = weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and n % cpu_matmul.LANES == 0 and k % 2 == 0
        ops = cpu_matmul.kernels() if fits else None
        self.cpp = ops is not None
        self.max_rows = ops.max_rows(torch.bfloat16, dense=True) if self.cpp else KERNEL_MAX_ROWS
        if self.cpp:
            self.ops = ops
            self.packed = cpu_matmul.pack_bf16(weight)
        else:
            self.weight = weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.cpp and x.shape[0] <= self.max_rows:
            y = self.ops.bf16_mm(x, self.packed, self.out_features)
            return y if self.bias is None else y + self.bias
        return F.linear(x, self.dequantized(), self.bias)

    def dequantized(self) -> torch.Tensor:
        if self.cpp:
            return self.ops.bf16_unpack(self.packed, self.out_features, self.in_features)
        return self.weight

    def nbytes(self) -> int:
        return self.out_features * self.in_features * (2 if self.cpp else self.weight.element_size())


class Int8Linear:
    """Symmetric int8: w = q * scale.

    With float32 activations (the lm_head: logits are never rounded to bf16) on a CPU the C++
    kernel serves, there is one fp16 scale per output row and group of 32 inputs (`cpu_matmul.GROUP`, the kernels' group), and the codes
    are kept in its column-block layout, multiplied by it at any row count. A GGUF Q8_0 table (the
    default model's tied embedding) is exactly that format, so its values are kept as the file has
    them: one scale per whole row rounded them again, which raised the default int4 model's drift
    from dense float32 by a quarter (exact KL 0.00266 -> 0.00340 on bench_drift.py's 823 positions,
    AMD EPYC Zen 3, avx2). Otherwise one scale per row, [N, K] codes for torch's
    `_weight_int8pack_mm` (which takes no groups)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype):
        w = weight.float()
        self.bias = None if bias is None else bias.to(dtype)
        self.out_features, self.in_features = weight.shape
        ops = cpu_matmul.kernels() if weight.device.type == "cpu" and dtype == torch.float32 else None
        self.cpp = self.out_features % cpu_matmul.LANES == 0 and ops is not None
        if self.cpp:
            n, k = w.shape
            g = cpu_matmul.GROUP
            groups = -(-k // g)
            padded = F.pad(w, (0, groups * g - k)).view(n, groups, g)
            # [N, groups], rounded to fp16 first (Q8_0's own scales are fp16: exact for them), and the
            # codes against the rounded scale; fp16 halves the scales' bytes read per decode step.
            scale = (padded.abs().amax(dim=2) / 127.0).clamp(min=1e-7).to(torch.float16).float()
            q = torch.round(padded / scale[:, :, None]).clamp(-127, 127).to(torch.int8).view(n, -1)[:, :k]
            self.ops = ops
            self.blocked = cpu_matmul.pack_int8(q.contiguous())
            self.blocked_scale = cpu_matmul.pack_int8_scales(scale)   # the only copy of the scales
        else:
            scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
            self._row_scale = scale.to(dtype)
            self.q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous()

    @property
    def scale(self) -> torch.Tensor:
        """[N, groups] float32 on the C++ tiles' path (a copy out of their layout), else [N]."""
        if self.cpp:
            return self.blocked_scale.transpose(1, 2).reshape(self.out_features, -1).float()
        return self._row_scale

    def codes(self) -> torch.Tensor:
        """The int8 codes as [N, K] (a copy when they are kept in column blocks)."""
        if self.cpp:
            return self.blocked.transpose(1, 2).reshape(self.out_features, self.in_features)
        return self.q

    def _per_element(self, group_scales: torch.Tensor) -> torch.Tensor:
        """[rows, groups] group scales -> [rows, K] float32, each input's own."""
        return group_scales.float().repeat_interleave(cpu_matmul.GROUP, dim=1)[:, :self.in_features]

    def dequantized(self) -> torch.Tensor:
        if self.cpp:
            return self.codes().float() * self._per_element(self.scale)
        return self.q.to(self._row_scale.dtype) * self._row_scale[:, None]

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Dequantized rows (an embedding lookup without dequantizing the whole table)."""
        if self.cpp:   # the C++ lookup, the one decode_logits runs too
            return self.ops.int8_rows(self.blocked, self.blocked_scale, ids)
        return self.q[ids].to(self._row_scale.dtype) * self._row_scale[ids, None]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.cpp:
            y = self.ops.int8_mm_f32(x, self.blocked, self.blocked_scale)
        elif x.shape[0] > KERNEL_MAX_ROWS:
            return F.linear(x, self.dequantized(), self.bias)
        else:
            y = torch.ops.aten._weight_int8pack_mm(x, self.q, self._row_scale)
        return y if self.bias is None else y + self.bias

    def nbytes(self) -> int:
        scale = self.blocked_scale if self.cpp else self._row_scale
        return self.out_features * self.in_features + scale.numel() * scale.element_size()


class Int4Linear:
    """Asymmetric int4 in groups of INT4_GROUP along the input dim: w = (q - 8) * s + z.

    GGUF Q4_0/Q4_1 blocks are exactly this format (32 weights, a scale and a minimum), and
    min/max requantization of their dequantized values reproduces the file's codes, so a Q4
    file loses nothing here beyond rounding its f16 scales to the activation dtype."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype):
        n, k = weight.shape
        if not int4_supported(weight.shape):
            raise ValueError(f"int4 needs out_features % {_INT4_ROW_TILE} == 0 and in_features % {INT4_GROUP} == 0; got {n}x{k}")
        g = weight.float().view(n, k // INT4_GROUP, INT4_GROUP)
        lo, hi = g.amin(dim=-1), g.amax(dim=-1)
        scale = ((hi - lo) / 15.0).clamp(min=1e-12)
        q = torch.round((g - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).view(n, k)
        self.bias = None if bias is None else bias.to(dtype)
        self.out_features, self.in_features = n, k
        # Where sgrun's kernels serve this CPU level and the activation dtype: their layout (fp16
        # scale and minimum per group); otherwise torch's int4 kernel and its layout. One copy either way.
        ops = cpu_matmul.kernels() if weight.device.type == "cpu" else None
        self.dtype = dtype
        self.cpp = (ops is not None and dtype in ops.int4_dtypes and cpu_matmul.fits(n, k) and _fp16_safe(scale, lo))
        self.max_rows = ops.max_rows(dtype) if self.cpp else TORCH_INT4_MAX_ROWS.get(dtype, KERNEL_MAX_ROWS)
        if self.cpp:
            self.ops = ops
            self.codes, self.group_scales = cpu_matmul.pack_int4(q, scale, lo)
        else:
            self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2)
            zero = lo + 8.0 * scale
            # [k / group, n, 2] (scale, zero), the kernel's layout.
            self.scales_zeros = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous().to(dtype)

    def dequantized(self) -> torch.Tensor:
        """[n, k] in the activation dtype."""
        if self.cpp:
            return self.ops.int4_dequantize(self.codes, self.group_scales, self.out_features, self.in_features, self.dtype)
        return self._dequantized_torch_layout()

    def _dequantized_torch_layout(self) -> torch.Tensor:
        """Written straight into one buffer, then scaled in place: ~2x faster than unpack -> cat
        -> cast -> addcmul (2.0 vs 3.7-9.2 ms for 3072x576 at load 15)."""
        n, k = self.out_features, self.in_features
        sz = self.scales_zeros.transpose(0, 1)                     # [n, k / group, 2], a view
        scale = sz[..., 0:1]
        offset = sz[..., 1:2] - 8 * scale
        tile = torch_int4_row_tile()
        tiles = self.packed.view(n // tile, k, tile // 2).transpose(1, 2)
        out = torch.empty(n // tile, tile, k, dtype=sz.dtype)
        half = tile // 2
        out[:, :half] = tiles & 15          # rows j of each tile: low nibbles
        out[:, half:] = tiles >> 4          # rows j + tile/2: high nibbles
        w = out.view(n, k // INT4_GROUP, INT4_GROUP)
        w.mul_(scale).add_(offset)
        return out.view(n, k)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > self.max_rows:
            return F.linear(x, self.dequantized(), self.bias)
        if self.cpp:
            y = self.ops.int4_mm(x, self.codes, self.group_scales, self.out_features)
        else:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, INT4_GROUP, self.scales_zeros)
        return y if self.bias is None else y + self.bias

    def nbytes(self) -> int:
        if self.cpp:
            return self.codes.numel() + self.group_scales.numel() * self.group_scales.element_size()
        return self.packed.numel() + self.scales_zeros.numel() * self.scales_zeros.element_size()


def _fp16_safe(scale: torch.Tensor, minimum: torch.Tensor) -> bool:
    """The C++ layout keeps scales and minimums in fp16; weights beyond its range keep torch's."""
    return bool(scale.abs().max() < 6e4 and minimum.abs().max() < 6e4)


def _unpack_int4(packed: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """Invert _convert_weight_to_int4pack_for_cpu (checked against the packer in the tests)."""
    return _unpack_tiles(packed, n, k, torch_int4_row_tile())


def _unpack_tiles(packed: torch.Tensor, n: int, k: int, tile: int) -> torch.Tensor:
    """Bytes [n/tile, k, tile/2]: low nibble = row j of the tile, high nibble = row j + tile/2."""
    tiles = packed.view(n // tile, k, tile // 2)
    both = torch.cat([tiles & 15, tiles >> 4], dim=-1)         # [n/tile, k, tile]
    return both.transpose(1, 2).reshape(n, k)


def int4_supported(shape: torch.Size | tuple[int, ...]) -> bool:
    return shape[0] % _INT4_ROW_TILE == 0 and shape[1] % INT4_GROUP == 0


def make_linear(weight: torch.Tensor, bias: torch.Tensor | None, mode: str, dtype: torch.dtype) -> Linear:
    """A linear for `weight` [out, in] under quantization `mode`; int4 falls back to int8 for
    shapes the int4 kernel cannot tile."""
    if mode == "int4" and int4_supported(weight.shape):
        return Int4Linear(weight, bias, dtype)
    if mode in ("int4", "int8"):
        return Int8Linear(weight, bias, dtype)
    return DenseLinear(weight.to(dtype), None if bias is None else bias.to(dtype))
