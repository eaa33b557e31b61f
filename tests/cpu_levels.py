"""The CPU levels a kernel test runs at: every level this CPU supports that has a build of its
own (amx runs avx512_bf16's build, so it is not repeated), lowest first, and a fixture-style
helper that forces one for the code under test through SGRUN_CPU_ISA. An AVX-512 machine thus
tests its AVX2 kernels too; a level the CPU lacks is not in the list (its code cannot run here)."""

from __future__ import annotations

import pytest

from sgrun.kernels.cpu import isa

LEVELS = [lv.name for lv in isa.supported_levels() if lv.builds_as is None]
SIMD_LEVELS = [name for name in LEVELS if name != "scalar"]


def each_level(levels=tuple(SIMD_LEVELS)):
    """Parametrize a test over `levels` (ids = the level names)."""
    return pytest.mark.parametrize("level", list(levels), ids=list(levels))


@pytest.fixture
def at_level(monkeypatch, level):
    """Forces `level` (the test's parameter) for everything built inside the test."""
    monkeypatch.setenv(isa.ENV, level)
    return level


@pytest.fixture
def op_level(request, monkeypatch):
    """For a test whose module-scoped `op` fixture is parametrized over LEVELS: forces that level
    for what the test builds itself (attention backends, linears)."""
    level = request.node.callspec.params["op"]
    monkeypatch.setenv(isa.ENV, level)
    return level
