"""What several benchmarks share on their command line, and the load they record beside numbers.

Only options that are spelled, typed and meant the same in every benchmark that has them live
here (--threads, --rounds, --quantization, --dtype, --json); a benchmark's own options stay in
its file, and each keeps its own default. The machine is shared, so every benchmark prints the
load average with its numbers (docs/benchmarks.md compares ratios measured in one run only).
Benchmarks run as `python benchmarks/X.py`, which puts this folder on sys.path.

`machine_line()` names the CPU every benchmark ran on: its model, the SIMD flags that decide
which kernels run, and the CPU level in force (sgrun's kernels; $SGRUN_CPU_ISA forces a lower
one, `forced_level_env` also holds torch's own kernels to it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

# Benchmarks time the steady state: engines they build without an explicit compile= compile
# before they start (as they did before the default became "compile in the background");
# bench_startup.py removes this again for the starts it measures.
os.environ.setdefault("SGRUN_COMPILE", "1")


# The flags that decide which kernels run (sgrun's, torch's, llama.cpp's).
SIMD_FLAGS = ("avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
              "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimddp", "sve", "bf16", "i8mm")
# torch's own kernels held to a level: ATen's vectorised CPU kernels and oneDNN's GEMMs.
_TORCH_LEVEL = {"avx2": ("avx2", "AVX2"), "avx512": ("avx512", "AVX512_CORE"),
                "avx512_bf16": ("avx512", "AVX512_CORE_BF16"), "amx": ("avx512", "AVX512_CORE_AMX")}


def cpu_identity() -> str:
    """The family, model, clock and L3 a VM's CPU shows: many VMs name every AMD part "AMD EPYC",
    and Zen 1 (family 23 model 1, 2 GHz, 8 MiB L3) measures nothing like Zen 4 (family 25 model 17)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break
    except OSError:
        return ""
    parts = [f"family {fields['cpu family']} model {fields['model']}"] if "cpu family" in fields else []
    if "cpu MHz" in fields:
        parts.append(f"{float(fields['cpu MHz']):.0f} MHz")
    try:   # the last-level cache: index3 is L3 where the CPU has one
        l3 = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
        parts.append(f"L3 {l3}")
    except OSError:
        pass
    return f" ({', '.join(parts)})" if parts else ""


def machine_line(threads: int | None = None, env: dict[str, str] | None = None) -> str:
    """'cpu: <model>, 2 cores, flags [avx2 fma ...], cpu level avx2 (forced by SGRUN_CPU_ISA), torch X,
    threads, load'. `env`: describe a child process started with that environment instead."""
    import torch

    from sgrun.kernels.cpu.isa import cpu_features, cpu_model
    from sgrun.models.auto_config import cpu_level
    env = os.environ if env is None else env
    have = cpu_features()
    flags = " ".join(f for f in SIMD_FLAGS if f in have)
    forced = env.get("SGRUN_CPU_ISA")
    level = f"{forced} (forced by SGRUN_CPU_ISA)" if forced else f"{cpu_level()} (native)"
    torch_side = env.get("ATEN_CPU_CAPABILITY")
    torch_side = f", torch kernels held to {torch_side}/{env.get('ONEDNN_MAX_CPU_ISA')}" if torch_side else ""
    return (f"cpu: {cpu_model()}{cpu_identity()}, {os.cpu_count()} cores, flags [{flags}], cpu level {level}{torch_side}, "
            f"torch {torch.__version__}, {threads if threads is not None else torch.get_num_threads()} threads, "
            f"load {load_avg()}")


def forced_level_env(level: str | None) -> dict[str, str]:
    """Environment for a child process that runs at `level` as a CPU of that level would: sgrun's
    kernels via SGRUN_CPU_ISA, ATen's vector code via ATEN_CPU_CAPABILITY, oneDNN via
    ONEDNN_MAX_CPU_ISA (both read once, at start-up: so only in a fresh process). None: native."""
    env = {k: v for k, v in os.environ.items() if k not in ("SGRUN_CPU_ISA", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
    if level:
        aten, onednn = _TORCH_LEVEL.get(level, ("default", "ALL"))
        env.update(SGRUN_CPU_ISA=level, ATEN_CPU_CAPABILITY=aten, ONEDNN_MAX_CPU_ISA=onednn)
    return env


def add_threads(ap: argparse.ArgumentParser, default: int = 2, help: str | None = None) -> None:
    ap.add_argument("--threads", type=int, default=default, help=help)


def add_rounds(ap: argparse.ArgumentParser, default: int = 3) -> None:
    ap.add_argument("--rounds", type=int, default=default, help="times each measurement is repeated")


def add_quantization(ap: argparse.ArgumentParser, default: str, several: bool = False,
                     help: str | None = None) -> None:
    """`several`: a comma-separated list of settings measured side by side."""
    ap.add_argument("--quantization", default=default,
                    help=help or ("comma-separated: none, int8, int4" if several else "auto, none, int8 or int4"))


def add_dtype(ap: argparse.ArgumentParser, default: str) -> None:
    ap.add_argument("--dtype", default=default)


def add_json_output(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--json", dest="json_out", default=None, metavar="FILE", help="also write the results to FILE (JSON)")


def write_json(path: str | None, results: Any) -> None:
    """--json: the results as a file too (nothing without the option)."""
    if path:
        Path(path).write_text(json.dumps(results, indent=2))


def server_log_path(name: str) -> str:
    """Where a benchmark's server writes its log: a file named for it in the system's temporary
    folder (the printed path is where to look when a server does not start)."""
    return str(Path(tempfile.gettempdir()) / f"{name}.log")


def load_avg() -> str:
    """The 1, 5 and 15 minute load averages: '2.10 1.84 1.50'."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def uptime() -> str:
    """`uptime`'s line (time, users, load averages)."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def read_bandwidth_gbs() -> float:
    """Memory read bandwidth at torch's current thread count: best of 8 sums over a 256 MiB
    float32 tensor (far larger than any cache), in GB/s; the roofline benchmarks divide by it."""
    import time

    import torch
    x = torch.ones(64 << 20, dtype=torch.float32)
    best = float("inf")
    for _ in range(8):
        t = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t)
    return x.numel() * 4 / best / 1e9


SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile",
              "amx_bf16", "amx_int8", "asimd", "sve")


def cpu_line() -> str:
    """'CPU: <model>, <cores> cores, flags: avx2 avx512f ...' (the SIMD flags that decide speed)."""
    from sgrun.kernels.cpu.isa import cpu_features, cpu_model
    flags = cpu_features()
    return (f"CPU: {cpu_model()}, {os.cpu_count()} cores, flags: "
            f"{' '.join(f for f in SIMD_FLAGS if f in flags) or 'none of ' + '/'.join(SIMD_FLAGS[:3])}")


def require_peers(*modules: str) -> None:
    """Stop with the line that installs the peers a side-by-side benchmark needs (pyproject's
    `bench` extra pins them), instead of a ModuleNotFoundError halfway through its run."""
    import importlib.util
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"this benchmark runs beside {', '.join(modules)}; missing: {', '.join(missing)}. "
                         "Install the peers with: pip install -e '.[bench]'")
