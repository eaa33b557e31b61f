"""The int8 lm_head's two tiles side by side: integer dots against 16-bit activations (the default
where k is a multiple of 32 at the x86 levels) and the float FMA tile (SGRUN_INT8_HEAD=float):

    python benchmarks/bench_lm_head.py [--rows 1,4,24,64] [--calls 40] [--threads 2]

SmolLM2's shape (49152 x 576, the tied embedding as GGUF Q8_0: an fp16 scale per column and group of
32), four copies (~117 MB) so each call streams its table from DRAM as a decode step does. The two
tiles alternate call by call in one process, so a host whose bandwidth moves moves both sides alike;
the medians and their ratio are printed per row count, at the level this process runs (forced with
SGRUN_CPU_ISA). docs/cpu_kernels.md ("The int8 lm_head on integer dots") reads these figures.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from bench_options import add_threads, load_avg, machine_line  # noqa: E402

FLOAT_ENV = "SGRUN_INT8_HEAD"


def tables(ops_module, n: int = 49152, k: int = 576) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """SmolLM2's int8 lm_head (the tied embedding, GGUF Q8_0: an fp16 scale per 32), 4 copies (~117 MB)."""
    out = []
    for i in range(4):
        g = torch.Generator().manual_seed(i)
        codes = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
        scale = torch.rand(n, k // 32, generator=g) * 0.01 + 1e-3
        out.append((ops_module.pack_int8(codes), ops_module.pack_int8_scales(scale)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    add_threads(ap)
    ap.add_argument("--rows", default="1,4,24,64")
    ap.add_argument("--calls", type=int, default=40, help="calls per tile and row count")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_line(args.threads), flush=True)
    from sgrun.kernels.cpu import matmul
    ops = matmul.kernels()
    if ops is None:
        raise SystemExit("no matmul kernels at this CPU level: nothing to compare")
    mats = tables(matmul)
    for rows in (int(r) for r in args.rows.split(",")):
        x = torch.randn(rows, 576)
        times: dict[str, list[float]] = {"integer": [], "float": []}
        for i in range(args.calls):
            for name in (("integer", "float") if i % 2 else ("float", "integer")):
                if name == "float":
                    os.environ[FLOAT_ENV] = "float"
                else:
                    os.environ.pop(FLOAT_ENV, None)
                q, s = mats[i % len(mats)]
                t = time.perf_counter()
                ops.int8_mm_f32(x, q, s)
                times[name].append(time.perf_counter() - t)
        os.environ.pop(FLOAT_ENV, None)
        a, b = statistics.median(times["integer"]), statistics.median(times["float"])
        print(f"rows {rows}: integer {a * 1e3:.3f} ms, float {b * 1e3:.3f} ms, float / integer {b / a:.2f}x"
              f"  (load {load_avg()})", flush=True)


if __name__ == "__main__":
    main()
