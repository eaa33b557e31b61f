"""What several benchmarks share on their command line, and the load they record beside numbers.

Only options that are spelled, typed and meant the same in every benchmark that has them live
here (--threads, --rounds, --quantization, --dtype, --json); a benchmark's own options stay in
its file, and each keeps its own default. The machine is shared, so every benchmark prints the
load average with its numbers (docs/benchmarks.md compares ratios measured in one run only).
Benchmarks run as `python benchmarks/X.py`, which puts this folder on sys.path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any


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
    from sgrun.models.cpp_build import cpu_flags
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    flags = set(cpu_flags().split(":", 1)[-1].split())
    return f"CPU: {model}, {os.cpu_count()} cores, flags: {' '.join(f for f in SIMD_FLAGS if f in flags) or 'none of ' + '/'.join(SIMD_FLAGS[:3])}"
