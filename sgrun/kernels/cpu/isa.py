"""The CPU's instruction-set level, as the C++ kernels are built for it.

A level is a named set of CPU features and the compiler flags that target exactly them, so the
build for a level is the code that runs at that level (no -march=native: a build made on an
AVX-512 machine for `avx2` runs on any AVX2 CPU and contains no AVX-512 instruction).

x86-64, lowest first:
- `avx2`: AVX2 + FMA + F16C (x86-64-v3), what every x86 laptop and cloud VM of the last decade has;
- `avx512`: AVX-512 F/BW/VL/DQ/CD (x86-64-v4);
- `avx512_bf16`: plus AVX512-BF16 and AVX512-VNNI;
- `amx`: plus AMX tiles (the C++ kernels are avx512_bf16's; oneDNN's dense GEMM uses the tiles).
aarch64: `neon` (Advanced SIMD, always there) and `neon_dotprod` (the SDOT instructions).
`scalar` on either: no SIMD kernel, only the portable C++ paths (and torch for the rest).

The level used is the best the CPU has, or the one forced with SGRUN_CPU_ISA (tests and
benchmarks force the lower levels of the machine they run on); forcing a level above the CPU's
is an error naming the variable, since its code would die on an illegal instruction.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

ENV = "SGRUN_CPU_ISA"


@dataclass(frozen=True)
class Level:
    name: str
    arch: str                     # platform.machine() family: "x86_64" or "aarch64"
    features: tuple[str, ...]     # /proc/cpuinfo flags every CPU at this level has
    flags: tuple[str, ...]        # compiler flags that target exactly this level
    builds_as: str | None = None  # another level whose build this one runs (same C++ code)


X86 = (
    Level("scalar", "x86_64", (), ("-march=x86-64",)),
    Level("avx2", "x86_64", ("avx2", "fma", "f16c"), ("-march=x86-64-v3",)),
    Level("avx512", "x86_64", ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"),
          ("-march=x86-64-v4",)),
    Level("avx512_bf16", "x86_64",
          ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd", "avx512_bf16",
           "avx512_vnni"),
          ("-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni")),
    Level("amx", "x86_64",
          ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd", "avx512_bf16",
           "avx512_vnni", "amx_bf16", "amx_tile"),
          ("-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni"), builds_as="avx512_bf16"),
)
ARM = (
    Level("scalar", "aarch64", (), ("-march=armv8-a",)),
    Level("neon", "aarch64", ("asimd",), ("-march=armv8-a",)),
    Level("neon_dotprod", "aarch64", ("asimd", "asimddp"), ("-march=armv8.2-a+dotprod",)),
)
_ALIASES = {"none": "scalar", "native": "", "auto": ""}


class IsaError(ValueError):
    """SGRUN_CPU_ISA names no level, or one this CPU lacks."""


def machine_arch() -> str:
    m = platform.machine().lower()
    return "aarch64" if m in ("aarch64", "arm64") else "x86_64" if m in ("x86_64", "amd64") else m


def levels(arch: str | None = None) -> tuple[Level, ...]:
    """Every level of `arch` (default: this machine's), lowest first."""
    arch = arch or machine_arch()
    return X86 if arch == "x86_64" else ARM if arch == "aarch64" else (Level("scalar", arch, (), ()),)


def level_named(name: str, arch: str | None = None) -> Level:
    for lv in levels(arch):
        if lv.name == name:
            return lv
    raise IsaError(f"{ENV}={name!r} is not a CPU level here; use one of "
                   f"{', '.join(lv.name for lv in levels(arch))} (or native)")


def cpu_features() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo ('flags' on x86, 'Features' on ARM)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model", "CPU part")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def supported_levels() -> tuple[Level, ...]:
    """The levels this CPU runs, lowest first (scalar always)."""
    have = cpu_features()
    return tuple(lv for lv in levels() if set(lv.features) <= have)


def native_level() -> Level:
    return supported_levels()[-1]


def active_level() -> Level:
    """The level the kernels run at: SGRUN_CPU_ISA where set (checked against the CPU), else the best."""
    forced = os.environ.get(ENV, "").strip().lower()
    forced = _ALIASES.get(forced, forced)
    if not forced:
        return native_level()
    level = level_named(forced)
    if level not in supported_levels():
        missing = sorted(set(level.features) - cpu_features())
        raise IsaError(f"{ENV}={forced} needs CPU features this CPU lacks ({', '.join(missing)}); "
                       f"this CPU runs up to {native_level().name}")
    return level


def resolve(level: Level | str | None) -> Level:
    """A level given by name (checked against the CPU), as is, or the active one for None."""
    if level is None:
        return active_level()
    if isinstance(level, Level):
        return level
    lv = level_named(level)
    if lv not in supported_levels():
        raise IsaError(f"CPU level {lv.name} is not supported by this CPU (it runs up to {native_level().name})")
    return lv


def build_level(level: Level) -> Level:
    """The level whose compiled code `level` runs (amx runs avx512_bf16's build)."""
    return level_named(level.builds_as, level.arch) if level.builds_as else level
