"""The C++ small-batch matmuls (sgrun/kernels/cpu/matmul*.cpp) at every CPU level this machine
runs (tests/cpu_levels.py: AVX2 on an AVX-512 machine too): against a float64 reference on random
int4 weights, row invariance (a row's output is bit-identical alone and in any batch), the exact
dequantization, torch.compile without graph breaks, and the fallback where the build fails. A
level with tiles must build where the CPU runs it: a failed build fails, it does not skip."""

from __future__ import annotations

import pytest
import torch

from cpu_levels import SIMD_LEVELS, at_level, each_level  # noqa: F401  (at_level is a fixture)
from sgrun.kernels.cpu import isa
from sgrun.kernels.cpu import matmul as cpu_matmul
from sgrun.models.quant_linear import DenseLinear, Int4Linear, Int8Linear


@each_level()
def test_the_kernel_builds_at_every_level_the_cpu_runs(level):
    ops = cpu_matmul.kernels(level)
    assert ops is not None, f"the matmul kernel did not build for CPU level {level}"
    assert ops.bf16_dot == (level in ("avx512_bf16", "amx"))


def test_scalar_level_has_no_tiles_and_linears_keep_torch(monkeypatch):
    monkeypatch.setenv(isa.ENV, "scalar")
    assert cpu_matmul.kernels() is None
    assert not Int4Linear(torch.randn(128, 64) * 0.1, None, torch.bfloat16).cpp


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
    return packed, scales, w, (codes, s16, m16)


def q8_reference(x: torch.Tensor, parts) -> torch.Tensor:
    """What the int8-activation tiles compute, in float64: x quantized per row and group of 32 as the
    kernel does (d = max|x| / 127, q = round(x * 127 / max|x|) in float32), both the scale's and the
    minimum's term with the quantized x (d * q, as llama.cpp's Q8_1 blocks)."""
    codes, s16, m16 = parts
    m, k = x.shape
    xg = x.float().view(m, k // 32, 32)
    amax = xg.abs().amax(-1, keepdim=True)
    # IEEE float32 division as the kernel does it (torch's scalar / tensor multiplies by a reciprocal).
    inv = torch.where(amax > 0, torch.full_like(amax, 127.0) / amax, torch.zeros_like(amax))
    q = torch.round(xg * inv)
    d = (amax / 127.0).double()
    cg = codes.double().view(-1, k // 32, 32)
    dots = torch.einsum("mgi,ngi->mng", q.double(), cg)                    # integer dots per group
    qsum = (d * q.double().sum(-1, keepdim=True)).squeeze(-1)                # [m, groups]
    return (dots * d.squeeze(-1)[:, None, :] * s16[None]).sum(-1) + qsum @ m16.T


@each_level()
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("n,k", [(16, 32), (48, 96), (576, 576), (960, 576), (576, 1536)])
@pytest.mark.parametrize("m", [1, 2, 3, 5, 9, 33])
def test_int4_mm_matches_float64_reference(level, dtype, n, k, m):
    ops = cpu_matmul.kernels(level)
    packed, scales, w, parts = random_int4(n, k)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dtype)
    y = ops.int4_mm(x, packed, scales, n)
    assert y.dtype == dtype and y.shape == (m, n)
    exact = x.double() @ w.T
    out_rounding = 2 ** -8 if dtype == torch.bfloat16 else 1e-6
    if ops.bf16_dot and dtype == torch.bfloat16:
        # float32 accumulation, one bf16 rounding of the output (relative 2^-8), nothing more.
        assert ((y.double() - exact).abs() <= exact.abs() * 2 ** -8 + 1e-3 * exact.abs().max()).all()
    else:
        # int8 activations: exactly the quantized product up to float32 sums and the output rounding,
        ref = q8_reference(x, parts)
        assert ((y.double() - ref).abs() <= ref.abs() * out_rounding + 1e-5 * ref.abs().max()).all()
        # and that product is close to the exact one (8-bit activations per group of 32).
        assert (y.double() - exact).abs().max() <= 0.02 * exact.abs().max()


@each_level()
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_rows_are_bit_identical_alone_and_in_any_batch(level, dtype):
    ops = cpu_matmul.kernels(level)
    n, k = 960, 576
    packed, scales, _, _ = random_int4(n, k, seed=3)
    x = torch.randn(70, k, generator=torch.Generator().manual_seed(1)).to(dtype)
    full = ops.int4_mm(x, packed, scales, n)
    for m in (1, 2, 3, 5, 7, 8, 13):
        part = ops.int4_mm(x[:m].contiguous(), packed, scales, n)
        assert torch.equal(part, full[:m]), m
    for r in (0, 6, 41, 69):
        assert torch.equal(ops.int4_mm(x[r:r + 1].contiguous(), packed, scales, n)[0], full[r]), r


@pytest.mark.skipif("avx2" not in SIMD_LEVELS, reason="an x86 CPU's levels (ARM has no avx2 level to compare with)")
@pytest.mark.parametrize("m", [1, 2, 4, 9, 64])
def test_float32_activations_give_the_same_bits_at_every_x86_level(m):
    """Every x86 level's int8-activation path computes the AVX2 tile's numbers exactly: the AVX512-VNNI
    tile (matmul_avx512_vnni.cpp, two rows and more) sums the same exact integer dots and applies the
    scale and minimum in the same float32 order, so a model's outputs do not depend on the CPU level."""
    n, k = 960, 576
    packed, scales, _, _ = random_int4(n, k, seed=7)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m + 100)) * 3
    want = cpu_matmul.kernels("avx2").int4_mm(x, packed, scales, n)
    for level in SIMD_LEVELS:
        assert torch.equal(cpu_matmul.kernels(level).int4_mm(x, packed, scales, n), want), level


# The levels whose int8-activation tiles have a panel: the x86 ones without a VNNI tile (the AVX2
# panel) and ARM's with dotprod (the NEON panel; tests/test_kernel_driver.py runs it under qemu here).
PANEL_LEVELS = ("avx2", "avx512", "neon_dotprod")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("m", [3, 4, 5, 6, 7, 9, 257, 515])
def test_the_int4_panel_serves_six_rows_and_more_with_the_tiles_bits(dtype, m):
    """At the levels without a VNNI tile, int4_mm of 6 rows and more runs the panel
    (matmul_panel.cpp's int4_q8_panel: codes decoded once per block, then every row of a chunk of 256);
    every other level's build has none. Each row's output is the one-row tile's bits, the tail rows
    after the last full pass (3 rows on AVX2, 5 on NEON) and the rows past a chunk included, and the
    whole output is the level's tile's (the panel switched off)."""
    n, k = 960, 576
    packed, scales, _, parts = random_int4(n, k, seed=13)
    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(m)) * 3).to(dtype)
    for level in SIMD_LEVELS:
        ops = cpu_matmul.kernels(level)
        has_panel = bool(ops.module.set_panel(True))
        assert has_panel == (level in PANEL_LEVELS), level
        before = ops.module.panel_calls()
        y = ops.int4_mm(x, packed, scales, n)
        # the panel served exactly these calls (kPanelMinRows = 6)
        assert ops.module.panel_calls() - before == int(has_panel and m >= 6), level
        for r in sorted({0, 1, m // 2, m - 2, m - 1} | ({255, 256} if m > 256 else set())):
            assert torch.equal(ops.int4_mm(x[r:r + 1].contiguous(), packed, scales, n)[0], y[r]), (level, r)
        if dtype == torch.float32:
            torch.testing.assert_close(y.double(), q8_reference(x, parts), rtol=1e-4, atol=1e-3)
        try:
            ops.module.set_panel(False)
            before = ops.module.panel_calls()
            assert torch.equal(ops.int4_mm(x, packed, scales, n), y), level
            assert ops.module.panel_calls() == before, level
        finally:
            ops.module.set_panel(True)


@pytest.mark.parametrize("m", [1, 7, 64])
def test_float32_rows_quantize_as_the_generic_loop_does(m):
    """Float32 activations are quantized by matmul_common.cpp's AVX2 group code on x86 (the generic
    loop on NEON), bf16 ones by the generic loop: at the levels without bf16 dot products the bf16
    path computes in float32 and rounds once, so the same values through both give the same bf16 bits
    exactly when both quantize alike, ties of x * 127 / max|x| (rounded to the nearest even) and zero
    groups included."""
    n, k = 960, 576
    packed, scales, _, _ = random_int4(n, k, seed=17)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)) * 4
    ties = torch.tensor([127.0, 0.5, 1.5, 2.5, -0.5, -1.5, 126.5, -126.5, 3.5, -2.5, 64.5, 0.0])
    x[:, :ties.numel()] = ties          # group 0: max |x| = 127, so x * 127 / max|x| is x itself
    x[:, 32:64] = 0.0                   # group 1: all zero (d = 0)
    xb = x.bfloat16()
    levels = [lv for lv in SIMD_LEVELS if not cpu_matmul.kernels(lv).bf16_dot]
    assert levels, SIMD_LEVELS   # every CPU with tiles has a level without bf16 dot products (avx2, neon)
    for level in levels:
        ops = cpu_matmul.kernels(level)
        assert torch.equal(ops.int4_mm(xb, packed, scales, n), ops.int4_mm(xb.float(), packed, scales, n).bfloat16()), level


@pytest.mark.parametrize("m", [255, 256, 300, 1024])
def test_amx_int8_tiles_give_the_other_tiles_bits(m):
    """At amx, float32 activations of 256 rows and more (a prefill chunk) take the AMX-INT8 tiles
    (matmul_amx.cpp) where the CPU has them: the same exact integer dots and the same float32 steps
    in the same order as the VNNI tile, so the same bits, rows past the last full tile included.
    Where the build or the CPU lacks them, `set_amx` says so and the output is the level's own."""
    top = SIMD_LEVELS[-1]
    ops = cpu_matmul.kernels(top)
    n, k = 960, 576
    packed, scales, _, parts = random_int4(n, k, seed=11)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)) * 3
    try:
        assert ops.module.set_amx(False) is False
        plain = ops.int4_mm(x, packed, scales, n)
        has_tiles = {"amx_tile", "amx_int8"} <= isa.cpu_features() and "int4q8x512" in ops.module.tiles()
        assert ops.module.set_amx(True) == has_tiles
        before = ops.module.amx_calls()
        tiled = ops.int4_mm(x, packed, scales, n)
        # the tiles served this call exactly where they exist and the rows reach 256 (equal bits alone
        # would not show they ran)
        assert ops.module.amx_calls() - before == int(has_tiles and m >= 256)
    finally:
        ops.module.set_amx(isa.active_level().name == "amx")
    assert torch.equal(tiled, plain)
    torch.testing.assert_close(tiled.double(), q8_reference(x, parts), rtol=1e-4, atol=1e-3)
    if "avx2" in SIMD_LEVELS:   # and the AVX2 tile's bits, as every x86 level
        assert torch.equal(tiled, cpu_matmul.kernels("avx2").int4_mm(x, packed, scales, n))


@each_level()
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_dequantize_is_the_weight_rounded_once(level, dtype):
    ops = cpu_matmul.kernels(level)
    n, k = 96, 128
    packed, scales, w, _ = random_int4(n, k, seed=5)
    dense = ops.int4_dequantize(packed, scales, n, k, dtype)
    assert dense.dtype == dtype and torch.equal(dense, w.float().to(dtype))


@each_level()
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_int4_linear_uses_the_kernel_and_agrees_across_the_dense_switch(at_level, dtype):
    torch.manual_seed(0)
    w = torch.randn(192, 256) * 0.05
    lin = Int4Linear(w, torch.randn(192).to(dtype), dtype)
    assert lin.cpp and lin.ops.level == isa.build_level(isa.level_named(at_level)).name
    dense = lin.dequantized().double()
    # kernel below the switch, dense GEMM above; the int8-activation tiles have no switch (they take a
    # 300-row prefill chunk too: matmul.Q8_MAX_ROWS)
    switch = (lin.max_rows, lin.max_rows + 5) if lin.max_rows < 4096 else (300,)
    for rows in (1, 6, *switch):
        x = torch.randn(rows, 256).to(dtype)
        ref = x.double() @ dense.T + lin.bias.double()
        assert (lin(x).double() - ref).abs().max() < 0.02 * ref.abs().max()


@each_level()
def test_compiles_without_graph_breaks(at_level):
    torch.manual_seed(0)
    lin = Int4Linear(torch.randn(128, 64) * 0.1, None, torch.bfloat16)
    assert lin.cpp

    def f(x):
        return torch.nn.functional.silu(lin(x)) * 2

    compiled = torch.compile(f, fullgraph=True, dynamic=None)
    x = torch.randn(3, 64).bfloat16()
    assert torch.equal(compiled(x), f(x))


@pytest.mark.parametrize("level", ["avx2"] if "avx2" in SIMD_LEVELS else SIMD_LEVELS[:1])
def test_build_failure_falls_back_to_torchs_kernel(monkeypatch, level):
    """Checked at the lowest level with tiles (avx2 on x86), the one every x86 user has."""
    monkeypatch.setenv(isa.ENV, level)
    monkeypatch.setenv(cpu_matmul.FORCE_BUILD_FAILURE_ENV, "1")
    cpu_matmul.KERNEL.reset_for_tests()
    try:
        assert cpu_matmul.kernels() is None
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
    assert cpu_matmul.kernels() is not None   # the real build loads again for later tests


@each_level()
@pytest.mark.parametrize("m", [1, 3, 4, 6, 65])
def test_int8_float32_head_matches_float64_and_keeps_rows_invariant(at_level, m):
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
    # one fp16 scale per row and group of 32 inputs (a tail group of 8 here): the codes round w by their group's
    groups = torch.nn.functional.pad(w, (0, 24)).view(1056, 7, 32)
    assert head.scale.shape == (1056, 7)
    assert torch.equal(head.scale, (groups.abs().amax(dim=2) / 127.0).half().float())
    want = torch.round(groups / head.scale[:, :, None]).clamp(-127, 127).to(torch.int8).view(1056, -1)[:, :200]
    assert torch.equal(head.codes(), want)


def int8_head_tolerance(x: torch.Tensor, table: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """How far the int8 head may land from x @ table.T: where k is a multiple of 32 the tiles
    multiply x rounded to 16-bit integers per row and group of 32 (matmul_common.cpp's Quant16Rows:
    within half of d = max |x| / 32512 of x), so each output may move by sum |w| * d / 2; on top,
    float32's sums."""
    m, k = x.shape
    slack = 1e-5 * max(1.0, ref.abs().max().item())
    if k % 32:
        return torch.full_like(ref, slack)
    d = x.double().abs().view(m, k // 32, 32).amax(-1) / 32512.0
    return (d.repeat_interleave(32, dim=1) / 2) @ table.double().abs().T + slack


def x16_model(x: torch.Tensor, codes: torch.Tensor, scale16: torch.Tensor) -> torch.Tensor:
    """What the int8-head integer tiles compute at every level, step for step: X = rint(x * (32512 / max|x|)) per group of
    32 in float32, the exact integer dot with the codes, then acc = fma(float32(dot), s * d, acc)
    over the groups in order (d = max|x| / 32512; the fma's product is exact in float64)."""
    m, k = x.shape
    n, groups = codes.shape[0], k // 32
    xg = x.view(m, groups, 32)
    amax = xg.abs().amax(-1)
    full = torch.full_like(amax, 32512.0)   # tensor / tensor: float32 division (a scalar's rdiv multiplies by 1/x)
    inv = torch.where(amax > 0, full / amax, torch.zeros_like(amax))
    big = torch.round(xg * inv[..., None]).clamp(-32512, 32512).long()
    dots = torch.einsum("rgi,ngi->rng", big, codes.view(n, groups, 32).long())
    sd = scale16.float()[None] * (amax / full)[:, None, :]
    acc = torch.zeros(m, n)
    for g in range(groups):
        acc = (dots[..., g].float().double() * sd[..., g].double() + acc.double()).float()
    return acc


@each_level()
@pytest.mark.parametrize("m", [1, 2, 3, 5, 9])
def test_int8_head_integer_tiles_give_the_16_bit_models_bits_at_every_level(level, m):
    """The VNNI tile (avx512_bf16, amx), the AVX2 madd tile (avx2, avx512) and the NEON one (SDOT or
    SMULL) compute the same exact integer dots and the same float32 steps, so the lm_head's logits do
    not depend on the level, and each is exactly x16_model's."""
    g = torch.Generator().manual_seed(m)
    n, k = 160, 576
    codes = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    codes[0, :32] = -128   # the byte's extreme, which the VNNI tile's flipped sign bit must keep
    scale16 = (torch.rand(n, k // 32, generator=g) * 0.01 + 1e-3).half()
    blocked, blocked_scale = cpu_matmul.pack_int8(codes), cpu_matmul.pack_int8_scales(scale16.float())
    x = torch.randn(m, k, generator=g) * 3
    x[0, 32:64] = 0.0   # an all-zero group: d = 0
    x[0, 0], x[0, 1:32] = 1.0, -128.0 / 32512.0   # X = -128 against codes -128: each tile's widest products
    want = x16_model(x, codes, scale16)
    ops = cpu_matmul.kernels(level)
    got = ops.int8_mm_f32(x, blocked, blocked_scale)
    assert torch.equal(got, want)
    assert torch.equal(ops.int8_mm_f32(x[-1:].contiguous(), blocked, blocked_scale)[0], got[-1])


@each_level()
def test_int8_head_float_switch_keeps_the_float_tile(level, monkeypatch):
    """SGRUN_INT8_HEAD=float (what bench_lm_head.py alternates) runs the float FMA tile: float32 sums of
    the exact products, within 1e-5 of float64, where the integer tile's 16-bit inputs are not."""
    g = torch.Generator().manual_seed(11)
    n, k = 96, 576
    codes = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    scale16 = (torch.rand(n, k // 32, generator=g) * 0.01 + 1e-3).half()
    blocked, blocked_scale = cpu_matmul.pack_int8(codes), cpu_matmul.pack_int8_scales(scale16.float())
    x = torch.randn(2, k, generator=g) * 3
    ref = x.double() @ (codes.double() * scale16.double().repeat_interleave(32, dim=1)).T
    ops = cpu_matmul.kernels(level)
    monkeypatch.setenv("SGRUN_INT8_HEAD", "float")
    floats = ops.int8_mm_f32(x, blocked, blocked_scale)
    monkeypatch.delenv("SGRUN_INT8_HEAD")
    assert (floats.double() - ref).abs().max() < 1e-5 * ref.abs().max()
    assert torch.equal(ops.int8_mm_f32(x, blocked, blocked_scale), x16_model(x, codes, scale16))


@each_level()
def test_int8_head_keeps_a_q8_0_tables_values_exactly(at_level):
    """A GGUF Q8_0 table (int8 codes, one fp16 scale per 32, each block's largest code +-127, as the
    quantizer writes it) dequantized and built into the int8 head comes back code for code and scale
    for scale: the lm_head multiplies the file's values, not a second rounding of them."""
    torch.manual_seed(1)
    n, k = 64, 96
    codes = torch.randint(-127, 128, (n, k // 32, 32), dtype=torch.int8)
    codes[:, :, 0] = 127 * torch.where(torch.rand(n, k // 32) < 0.5, 1, -1).to(torch.int8)
    scales = (torch.rand(n, k // 32) * 0.01 + 1e-3).half()
    table = (codes.float() * scales.float()[:, :, None]).view(n, k)
    head = Int8Linear(table, None, torch.float32)
    assert head.cpp
    assert torch.equal(head.codes(), codes.view(n, k))
    assert torch.equal(head.scale, scales.float())
    assert torch.equal(head.dequantized(), table)
    x = torch.randn(3, k)
    ref = x.double() @ table.double().T
    assert ((head(x).double() - ref).abs() <= int8_head_tolerance(x, table, ref)).all()


@each_level()
def test_dense_bf16_linear_packs_once_and_matches_across_the_switch(at_level):
    torch.manual_seed(0)
    w = (torch.randn(96, 130) * 0.05).bfloat16()
    lin = DenseLinear(w, torch.randn(96).bfloat16())
    assert lin.cpp and not hasattr(lin, "weight")     # one copy, in the kernel's layout
    assert torch.equal(lin.dequantized(), w)
    # Without AMX the bf16-dot tiles serve every row count (max_rows unbounded): check 300 rows.
    bounded = lin.max_rows < 4096
    top = lin.max_rows if bounded else 300
    x = torch.randn(top + 9, 130).bfloat16()
    full = lin(x[:top].contiguous())
    for rows in (1, 2, 7, top):
        part = lin(x[:rows].contiguous())
        assert torch.equal(part, full[:rows]), rows                  # rows invariant
    ref = x.double() @ w.double().T + lin.bias.double()
    past = lin(x)
    assert (past.double() - ref).abs().max() < 0.02 * ref.abs().max()   # above max_rows: the dense GEMM
    if not bounded:
        assert torch.equal(past[:top], full)                          # no GEMM split: still the tiles
    assert not DenseLinear(w.float()).cpp


def test_forcing_a_level_the_cpu_lacks_is_an_error_naming_the_variable(monkeypatch):
    lacking = [lv.name for lv in isa.levels() if lv not in isa.supported_levels()]
    for name in lacking + ["no_such_level"]:
        monkeypatch.setenv(isa.ENV, name)
        with pytest.raises(isa.IsaError, match=isa.ENV):
            isa.active_level()
    monkeypatch.setenv(isa.ENV, "native")
    assert isa.active_level() == isa.native_level()


@each_level()
def test_the_thread_team_gives_the_same_rows_from_any_thread_and_after_fork(level):
    """thread_team.cpp: the matmuls split across its spinning workers. The same output whether called
    from the main thread, from several threads at once (one runs on the team, the others inline),
    with one thread, or in a forked child (which starts a fresh team)."""
    import os
    import threading
    ops = cpu_matmul.kernels(level)
    n, k = 3072, 576
    packed, scales, _, _ = random_int4(n, k, seed=5)
    xs = [torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16) for m in (1, 2, 5)]
    ref = [ops.int4_mm(x, packed, scales, n) for x in xs]
    got: dict[tuple[int, int], bool] = {}

    def run(t: int) -> None:
        for rep in range(40):
            i = (t + rep) % len(xs)
            got[(t, rep)] = torch.equal(ops.int4_mm(xs[i], packed, scales, n), ref[i])

    threads = [threading.Thread(target=run, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(got) == 120 and all(got.values())
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert all(torch.equal(ops.int4_mm(x, packed, scales, n), r) for x, r in zip(xs, ref))
    finally:
        torch.set_num_threads(before)
    pid = os.fork()
    if pid == 0:   # the child: a fresh team, the same numbers
        ok = all(torch.equal(ops.int4_mm(x, packed, scales, n), r) for x, r in zip(xs, ref))
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
