"""Batch-1 int4 matmuls with their weights streaming from DRAM, beside the machine's read bandwidth:

    python benchmarks/bench_matmul_stream.py [--threads 2] [--rounds 3]

bench_matmul.py times calls whose weights sit in cache; a decode step streams them (~96 MB for
SmolLM2 through a 32 MiB L3). Here each shape gets enough copies of its weight (~200 MB) that every
call reads its own from DRAM, and the average call's weight bytes over its time is printed in GB/s
next to `sum()`'s bandwidth over 256 MiB (bench_options.read_bandwidth_gbs, the roofline's divisor),
per round, at the level this process runs (forced with SGRUN_CPU_ISA), and the int8 lm_head's
(49152 x 576, the tied embedding) the same way. SmolLM2's shapes (qkv, o,
gate_up, down) run far below that bandwidth when called one at a time: each call pays its start
(the first lines' DRAM latency before the tile's prefetch runs ahead, the thread team's start, the
op's dispatch from Python); a 42 MB matrix shows the tiles' own streaming rate.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from bench_lm_head import tables  # noqa: E402
from bench_options import add_threads, load_avg, machine_line, read_bandwidth_gbs  # noqa: E402

SHAPES = {"qkv 960x576": (960, 576), "o 576x576": (576, 576), "gate_up 3072x576": (3072, 576),
          "down 576x1536": (576, 1536), "large 16384x4096": (16384, 4096)}


def copies_of(n: int, k: int, ops_module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random int4 weights of [n, k] in the kernels' layout, as many copies as make ~200 MB."""
    w = torch.randn(n, k).view(n, k // 32, 32)
    lo, hi = w.amin(-1), w.amax(-1)
    scale = ((hi - lo) / 15).clamp(min=1e-6)
    codes = torch.round((w - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).view(n, k)
    count = max(2, int(200e6 // (n * k * 0.625)))
    return [ops_module.pack_int4(codes, scale, lo) for _ in range(count)]


def stream_gbs(ops, mats, n: int, k: int, calls: int) -> float:
    x = torch.randn(1, k)
    for c, s in mats[:2]:
        ops.int4_mm(x, c, s, n)
    nbytes = mats[0][0].nbytes + mats[0][1].nbytes
    t = time.perf_counter()
    for i in range(calls):
        c, s = mats[i % len(mats)]
        ops.int4_mm(x, c, s, n)
    return nbytes * calls / (time.perf_counter() - t) / 1e9


def lm_head_gbs(ops, mats, k: int, calls: int) -> float:
    x = torch.randn(1, k)
    ops.int8_mm_f32(x, *mats[0])
    nbytes = mats[0][0].nbytes + mats[0][1].nbytes
    t = time.perf_counter()
    for i in range(calls):
        ops.int8_mm_f32(x, *mats[i % len(mats)])
    return nbytes * calls / (time.perf_counter() - t) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    add_threads(ap)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_line(args.threads), flush=True)
    from sgrun.kernels.cpu import matmul
    ops = matmul.kernels()
    weights = {name: copies_of(n, k, matmul) for name, (n, k) in SHAPES.items()}
    head = tables(matmul)
    for r in range(args.rounds):
        line = [f"sum() {read_bandwidth_gbs():.1f}"]
        for name, (n, k) in SHAPES.items():
            line.append(f"{name} {stream_gbs(ops, weights[name], n, k, 50 if n > 10000 else 400):.1f}")
        line.append(f"lm_head int8 49152x576 {lm_head_gbs(ops, head, 576, 24):.1f}")
        print(f"round {r + 1} GB/s: " + ", ".join(line) + f"  (load {load_avg()})", flush=True)


if __name__ == "__main__":
    main()
