"""Sliding-window prefill (Gemma 3's local layers): the C++ prefill kernel's tiled window walk
against the per-row path windowed layers took before it, in one run, interleaved.

    python benchmarks/bench_window_prefill.py [--gguf PATH] [--prompt 2048] [--rounds 3] [--threads 2]
                                              [--kernel-only] [--causal-only]

Before the window was a bound of the vector and tile paths' walk, a windowed layer's prefill ran
the kernel's portable path (one work item per row and head, scalar loops over its window). That
path is still the kernel's `portable=True`, window included, so "per-row" here is exactly what
windowed layers ran before, and "tiled" what they run now:
- TTFT of a `--prompt`-token prompt on `--gguf` (default: bench_models.py's Gemma-3-1B Q4_0): the
  engine as it is, and with its windowed layers' prefill calls sent to the per-row path;
- one layer's prefill attention on that prompt at Gemma-3-1B's shape (4 query heads, 1 kv head,
  head dim 256, window 512) on the engine's pool dtype: windowed tiled, windowed per-row, and the
  same layer without a window (a global layer: the bound costs it nothing), and SmolLM2's global
  shape (9 / 3 heads, head dim 64).
`--causal-only` times the global layers alone, and runs against a checkout whose kernel predates the
window argument too (the comparison of a global layer before and after: run it in both).
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import time
from pathlib import Path

import torch

from bench_options import add_threads, load_avg, machine_line, uptime

DEFAULT_GGUF = Path.home() / ".cache" / "sgrun" / "bench_models" / "gemma3-1b" / "gemma3-1b-Q4_0.gguf"


def prefill_module():
    """The kernel's Python module: sgrun.kernels.cpu's, or sgrun.cpu_kernels' in a checkout from
    before that layout (--causal-only compares against such a tree too)."""
    try:
        from sgrun.kernels.cpu import prefill_attention
    except ImportError:   # the old module name exists only in such a checkout
        return importlib.import_module("sgrun.cpu_kernels.prefill_attention")
    return prefill_attention


class PerRowWindows:
    """A prefill kernel module whose windowed calls take the portable per-row path (the path every
    windowed layer took before the vector paths had the window); global calls are untouched."""

    def __init__(self, op):
        self.op = op

    def prefill_attention(self, *args):
        args = list(args)
        if args[-1]:   # window > 0
            args[9] = True   # portable
        return self.op.prefill_attention(*args)

    def __getattr__(self, name):
        return getattr(self.op, name)


def call_kernel(op, q, kc, vc, table, meta, out, window: int, portable: bool = False) -> None:
    bf16_from, use_amx = prefill_module().bf16_from, prefill_module().use_amx
    args = (q, kc, vc, table, *meta, q.shape[-1] ** -0.5, out, portable, bf16_from(), use_amx(op))
    try:
        op.prefill_attention(*args, window)
    except TypeError:   # a kernel from before the window argument: global layers only
        assert window == 0
        op.prefill_attention(*args)


def time_ms(fn, reps: int) -> float:
    fn()
    best = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best.append(time.perf_counter() - t)
    return 1000 * statistics.median(best)


def kernel_rows(length: int, pool_dtype: torch.dtype, q_dtype: torch.dtype, rounds: int, causal_only: bool) -> None:
    op = prefill_module().load_kernel()
    shapes = [("Gemma-3-1B", 4, 1, 256, 512), ("SmolLM2-135M", 9, 3, 64, 0)]
    print(f"one layer's prefill attention, {length} tokens, {pool_dtype} pool, {q_dtype} queries "
          f"(median of {rounds}, ms):")
    for name, H, KV, D, window in shapes:
        ps = 16
        pages = -(-length // ps)
        g = torch.Generator().manual_seed(0)
        kc = torch.randn(KV, pages, ps, D, generator=g).to(pool_dtype)
        vc = torch.randn(KV, pages, ps, D, generator=g).to(pool_dtype)
        q = torch.randn(length, H, D, generator=g).to(q_dtype)
        out = torch.empty_like(q)
        meta = [torch.tensor([x]) for x in (0, length, length)]
        table = torch.arange(pages)[None]
        runs = {"global (causal)": lambda: call_kernel(op, q, kc, vc, table, meta, out, 0)}
        if window and not causal_only:
            runs[f"window {window}, tiled"] = lambda: call_kernel(op, q, kc, vc, table, meta, out, window)
            runs[f"window {window}, per-row"] = lambda: call_kernel(op, q, kc, vc, table, meta, out, window, True)
        got = {k: [] for k in runs}
        for _ in range(rounds):   # interleaved, so a load change hits every path alike
            for k, fn in runs.items():
                got[k].append(time_ms(fn, 1 if "per-row" in k else 3))
        med = {k: statistics.median(v) for k, v in got.items()}
        line = ", ".join(f"{k} {v:.1f}" for k, v in med.items())
        if len(med) == 3:
            line += f"; tiled / per-row = {med[f'window {window}, tiled'] / med[f'window {window}, per-row']:.3f}"
        print(f"  {name} (H={H}, KV={KV}, D={D}): {line}  (load {load_avg()})", flush=True)


def engine_rows(args) -> None:
    import sgrun
    engine = sgrun.Engine(str(args.gguf), num_threads=args.threads)
    attn = engine.runner.attn
    op = attn.prefill_op
    windows = [w for w in getattr(attn, "windows", []) if w]
    print(f"engine: {args.gguf.name}, {len(windows)} of {len(attn.windows)} layers windowed "
          f"({sorted(set(windows))}), prefill attention: {attn.prefill_kernel(engine.runner.model.dtype)}, "
          f"pool {attn.pool.k[0].dtype}, model {engine.runner.model.dtype}")
    if op is None:
        raise SystemExit("no C++ prefill kernel at this level: nothing to compare")
    rng = random.Random(0)
    params = sgrun.SamplingParams(max_new_tokens=1, temperature=0)

    def ttft(kernel) -> float:
        attn.prefill_op = kernel
        engine.flush_cache()
        prompt = [rng.randrange(300, 30000) for _ in range(args.prompt)]
        return engine.generate([prompt], params)[0].ttft

    ttft(op)   # warm
    got = {"tiled": [], "per-row": []}
    for _ in range(args.rounds):
        got["tiled"].append(ttft(op))
        got["per-row"].append(ttft(PerRowWindows(op)))
    attn.prefill_op = op
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"TTFT, {args.prompt}-token prompt (median of {args.rounds}, s): tiled {med['tiled']:.2f} "
          f"{[round(x, 2) for x in got['tiled']]}, per-row {med['per-row']:.2f} "
          f"{[round(x, 2) for x in got['per-row']]}; tiled / per-row = {med['tiled'] / med['per-row']:.3f} "
          f"(load {load_avg()})", flush=True)
    kernel_rows(args.prompt, attn.pool.k[0].dtype, engine.runner.model.dtype, args.rounds, False)
    engine.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kernel-only", action="store_true", help="only one layer's attention (no model)")
    ap.add_argument("--causal-only", action="store_true", help="only the global layers (any checkout's kernel)")
    add_threads(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_line(args.threads))
    print(uptime())
    if args.kernel_only or args.causal_only:
        kernel_rows(args.prompt, torch.bfloat16, torch.float32, args.rounds, args.causal_only)
    else:
        engine_rows(args)
    print(uptime())


if __name__ == "__main__":
    main()
