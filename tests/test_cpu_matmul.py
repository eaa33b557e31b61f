"""The C++ small-batch matmul (models/cpu_matmul.cpp): against a float64 reference on random
int4 weights, row invariance (a row's output is bit-identical alone and in any batch), the exact
dequantization, torch.compile without graph breaks, and the fallback where the build fails."""

from __future__ import annotations

import pytest
import torch

from sgrun.models import cpu_matmul
from sgrun.models.quant_linear import DenseLinear, Int4Linear, Int8Linear

# Only what is truly absent is skipped: on a CPU without AVX512-BF16 the kernel does not exist
# (Int4Linear then runs torch's kernel, which test_quantization.py and the fallback test below
# cover). Where the CPU has it, a failed build fails test_the_kernel_builds_where_the_cpu_has_it.
needs_kernel_cpu = pytest.mark.skipif(not cpu_matmul.cpu_supported(),
                                      reason="this CPU has no AVX512-BF16, so the C++ kernel does not exist here")


def test_the_kernel_builds_where_the_cpu_has_it():
    assert cpu_matmul.available() == cpu_matmul.cpu_supported()


def random_int4(n: int, k: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.int32)
    scale = torch.rand(n, k // 32, generator=g) * 0.02 + 1e-3
    minimum = -torch.rand(n, k // 32, generator=g) * 0.15
    packed, scales = cpu_matmul.pack_int4(codes, scale, minimum)
    # The weight the kernel multiplies by: its fp16 scale and minimum.
    s16 = scales[:, :, 0, :].permute(0, 2, 1).reshape(n, k // 32).double()
    m16 = scales[:, :, 1, :].permute(0, 2, 1).reshape(n, k // 32).double()
    w = (codes.double().view(n, k // 32, 32) * s16[..., None] + m16[..., None]).view(n, k)
    return packed, scales, w


@needs_kernel_cpu
@pytest.mark.parametrize("n,k", [(16, 32), (48, 96), (576, 576), (960, 576), (576, 1536)])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 9, 33])
def test_int4_mm_matches_float64_reference(n, k, m):
    packed, scales, w = random_int4(n, k)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).bfloat16()
    y = cpu_matmul.int4_mm(x, packed, scales, n)
    assert y.dtype == torch.bfloat16 and y.shape == (m, n)
    ref = x.double() @ w.T
    # float32 accumulation, one bf16 rounding of the output (relative 2^-8), nothing more.
    assert ((y.double() - ref).abs() <= ref.abs() * 2 ** -8 + 1e-3 * ref.abs().max()).all()


@needs_kernel_cpu
def test_rows_are_bit_identical_alone_and_in_any_batch():
    n, k = 960, 576
    packed, scales, _ = random_int4(n, k, seed=3)
    x = torch.randn(70, k, generator=torch.Generator().manual_seed(1)).bfloat16()
    full = cpu_matmul.int4_mm(x, packed, scales, n)
    for m in (1, 2, 3, 5, 7, 8, 13):
        part = cpu_matmul.int4_mm(x[:m].contiguous(), packed, scales, n)
        assert torch.equal(part, full[:m]), m
    for r in (0, 6, 41, 69):
        assert torch.equal(cpu_matmul.int4_mm(x[r:r + 1].contiguous(), packed, scales, n)[0], full[r]), r


@needs_kernel_cpu
def test_dequantize_is_the_weight_rounded_once():
    n, k = 96, 128
    packed, scales, w = random_int4(n, k, seed=5)
    dense = cpu_matmul.int4_dequantize(packed, scales, n, k)
    assert torch.equal(dense, w.float().bfloat16())


@needs_kernel_cpu
def test_int4_linear_uses_the_kernel_for_bf16_and_agrees_across_the_dense_switch():
    torch.manual_seed(0)
    w = torch.randn(192, 256) * 0.05
    lin = Int4Linear(w, torch.randn(192).bfloat16(), torch.bfloat16)
    assert lin.cpp
    dense = lin.dequantized().double()
    for rows in (1, 6, lin.max_rows, lin.max_rows + 5):   # kernel below the switch, dense GEMM above
        x = torch.randn(rows, 256).bfloat16()
        ref = x.double() @ dense.T + lin.bias.double()
        assert (lin(x).double() - ref).abs().max() < 0.02 * ref.abs().max()
    # float32 activations keep torch's kernel and layout.
    assert not Int4Linear(w, None, torch.float32).cpp


@needs_kernel_cpu
def test_compiles_without_graph_breaks():
    torch.manual_seed(0)
    lin = Int4Linear(torch.randn(128, 64) * 0.1, None, torch.bfloat16)

    def f(x):
        return torch.nn.functional.silu(lin(x)) * 2

    compiled = torch.compile(f, fullgraph=True, dynamic=None)
    x = torch.randn(3, 64).bfloat16()
    assert torch.equal(compiled(x), f(x))


def test_build_failure_falls_back_to_torchs_kernel(monkeypatch):
    monkeypatch.setenv(cpu_matmul.FORCE_BUILD_FAILURE_ENV, "1")
    cpu_matmul.KERNEL.reset_for_tests()
    try:
        torch.manual_seed(0)
        w = torch.randn(128, 64) * 0.1
        lin = Int4Linear(w, None, torch.bfloat16)
        assert not lin.cpp
        x = torch.randn(2, 64).bfloat16()
        ref = x.double() @ lin.dequantized().double().T
        assert (lin(x).double() - ref).abs().max() < 0.02 * ref.abs().max()
    finally:
        monkeypatch.delenv(cpu_matmul.FORCE_BUILD_FAILURE_ENV)
        cpu_matmul.KERNEL.reset_for_tests()
    assert cpu_matmul.available() == cpu_matmul.cpu_supported()   # the real build loads again for later tests


@needs_kernel_cpu
@pytest.mark.parametrize("m", [1, 3, 4, 6, 65])
def test_int8_float32_head_matches_float64_and_keeps_rows_invariant(m):
    torch.manual_seed(m)
    w = torch.randn(1056, 200) * 0.05
    head = Int8Linear(w, None, torch.float32)
    assert head.cpp
    x = torch.randn(m, 200)
    y = head(x)
    ref = x.double() @ head.dequantized().double().T
    assert y.dtype == torch.float32 and (y.double() - ref).abs().max() < 1e-5 * max(1.0, ref.abs().max().item())
    assert torch.equal(head(x[-1:].contiguous())[0], y[-1])
    ids = torch.tensor([0, 17, 1055, 3])
    assert torch.equal(head.rows(ids), head.dequantized()[ids])
    assert torch.equal(head.codes(), torch.round(w / head.scale[:, None]).clamp(-127, 127).to(torch.int8))


@needs_kernel_cpu
def test_dense_bf16_linear_packs_once_and_matches_across_the_switch():
    torch.manual_seed(0)
    w = (torch.randn(96, 130) * 0.05).bfloat16()
    lin = DenseLinear(w, torch.randn(96).bfloat16())
    assert lin.cpp and not hasattr(lin, "weight")     # one copy, in the kernel's layout
    assert torch.equal(lin.dequantized(), w)
    x = torch.randn(lin.max_rows + 9, 130).bfloat16()
    full = lin(x[: lin.max_rows].contiguous())
    for rows in (1, 2, 7, lin.max_rows):
        part = lin(x[:rows].contiguous())
        assert torch.equal(part, full[:rows]), rows                  # rows invariant
    ref = x.double() @ w.double().T + lin.bias.double()
    assert (lin(x).double() - ref).abs().max() < 0.02 * ref.abs().max()   # above max_rows: oneDNN on the unpacked weight
    assert not DenseLinear(w.float()).cpp
