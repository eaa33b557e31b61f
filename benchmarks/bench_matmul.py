"""Small-batch weight-only matmuls on SmolLM2's linear shapes, side by side in one process:

    python benchmarks/bench_matmul.py [--threads 2] [--rows 1,2,4,7,16,32,64,128] [--reps 200]
                                      [--levels avx2,avx512,avx512_bf16]   (default: every level the CPU runs)

Per CPU level (sgrun/kernels/cpu/isa.py; the CPU model, its SIMD flags and the level are printed):
- sgrun int4 bf16 / f32: the C++ kernel (sgrun/kernels/cpu/matmul*.cpp) with bf16 or float32
  activations, codes and fp16 scales in column blocks;
- torch int4: aten._weight_int4pack_mm_for_cpu on the same codes (bf16 scales);
- sgrun dequantize + dense: what a chunk above KERNEL_MAX_ROWS pays (C++ dequantize, then F.linear);
- dense bf16: F.linear on the dequantized weight (oneDNN), the weight already in memory;
- sgrun bf16: the same dense bf16 weight through the C++ kernel (DenseLinear's path);
- f32 tile (the levels with the int4 panel: avx2, avx512, neon, neon_dotprod): int4 f32 again with
  the panel switched off (`set_panel(False)`), the level's tile the panel replaces from 6 rows (the
  same output bits), timed right after `int4 f32`, so the two columns are an A/B in one process.

Each figure is the minimum over `--reps` calls (the machine is shared: the minimum is the least
disturbed estimate of a call's own cost), in microseconds, with the load average. Weights are
cold only on the first call: these are in-cache numbers, a bound on what a step can reach.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench_options import add_threads, load_avg, machine_line  # noqa: E402

from sgrun.kernels.cpu import isa  # noqa: E402
from sgrun.kernels.cpu import matmul as cpu_matmul  # noqa: E402

SHAPES = {"qkv 960x576": (960, 576), "o 576x576": (576, 576), "gate_up 3072x576": (3072, 576),
          "down 576x1536": (576, 1536)}


def best_us(fn, reps: int) -> float:
    for _ in range(5):
        fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_threads(ap)
    ap.add_argument("--rows", default="1,2,4,7,16,32,64,128")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--levels", default=",".join(lv.name for lv in isa.supported_levels()
                                                 if lv.name != "scalar" and lv.builds_as is None))
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    torch.set_num_threads(args.threads)
    simd = sorted(f for f in isa.cpu_features() if f.startswith(("avx", "amx", "fma", "f16c", "asimd")))
    print(f"CPU {isa.cpu_model()}; SIMD flags {' '.join(simd)}; native level {isa.native_level().name}")
    print(f"{args.threads} threads, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, load {load_avg()}")
    for level in args.levels.split(","):
        ops = cpu_matmul.kernels(level)
        if ops is None:
            raise SystemExit(f"the C++ kernel did not build for level {level}")
        print(f"\n=== level {level} ({'bf16 dot products for bf16' if ops.bf16_dot else 'int8 x int4 dot products'})")
        bench_level(ops, args)


def bench_level(ops: cpu_matmul.MatmulKernels, args) -> None:
    g = torch.Generator().manual_seed(0)
    for name, (n, k) in SHAPES.items():
        codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.int32)
        scale = torch.rand(n, k // 32, generator=g) * 0.02 + 1e-3
        minimum = -torch.rand(n, k // 32, generator=g) * 0.15
        packed, scales = cpu_matmul.pack_int4(codes, scale, minimum)
        torch_packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 2)
        sz = torch.stack([scale, minimum + 8 * scale], -1).transpose(0, 1).contiguous().bfloat16()
        dense = ops.int4_dequantize(packed, scales, n, k)
        dense_packed = cpu_matmul.pack_bf16(dense.contiguous())
        print(f"\n{name}  (load {load_avg()})")
        panel = bool(ops.module.set_panel(True))   # this level's build has the panel
        print(f"  {'rows':>5} {'int4 bf16':>11} {'int4 f32':>11} {'torch int4':>11} {'deq+dense':>11} {'dense bf16':>11}"
              f" {'sgrun bf16':>11}   torch/sgrun" + (f" {'f32 tile':>11}  tile/panel" if panel else ""))
        for m in (int(r) for r in args.rows.split(",")):
            x = torch.randn(m, k, generator=g).bfloat16()
            xf = x.float()
            ours = best_us(lambda: ops.int4_mm(x, packed, scales, n), args.reps)
            ours_f32 = best_us(lambda: ops.int4_mm(xf, packed, scales, n), args.reps)
            theirs = best_us(lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, torch_packed, 32, sz), args.reps)
            deq = best_us(lambda: F.linear(x, ops.int4_dequantize(packed, scales, n, k)), max(10, args.reps // 10))
            den = best_us(lambda: F.linear(x, dense), max(10, args.reps // 4))
            ours_bf16 = best_us(lambda: ops.bf16_mm(x, dense_packed, n), args.reps)
            line = (f"  {m:>5} {ours:>9.1f}us {ours_f32:>9.1f}us {theirs:>9.1f}us {deq:>9.1f}us {den:>9.1f}us"
                    f" {ours_bf16:>9.1f}us   {theirs / min(ours, ours_f32):5.2f}x")
            if panel:
                ops.module.set_panel(False)
                try:
                    tile = best_us(lambda: ops.int4_mm(xf, packed, scales, n), args.reps)
                finally:
                    ops.module.set_panel(True)
                line += f" {tile:>9.1f}us  {tile / ours_f32:5.2f}x"
            print(line)


if __name__ == "__main__":
    main()
