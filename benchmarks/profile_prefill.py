"""Where a prefill goes: torch.profiler over one whole-prompt prefill (max_new_tokens=1).

    python benchmarks/profile_prefill.py [--lengths 512,2048] [--quantization int4,none] [--dtype auto] [--threads 2]
                                         [--attention-backend cpp|torch] [--top N] [--compare-paths]
                                         [--kernel]

For each setting it prints the unprofiled TTFT (median of 3), then the profiled breakdown of
the model forward the engine picks (model_runner.forward_for; a compiled graph is set aside for
the profiled request, as it shows no ops): attention (everything inside the backend's per-layer
call: KV writes and the prefill kernel or SDPA), the C++ blocks between attention calls
(decode_block.cpp: the int4 linears with their activation quantization, norms, RoPE, the MLP),
the int4/int8 weight dequantization an eager prefill pays per linear per chunk, the GEMMs, norm /
RoPE / activation elementwise ops, other tensor ops, and Python (forward time not covered by any op). With --compare-paths (formerly --compare-sdpa) it only times TTFT
with each prefill attention path in the same engine, interleaved: the level's C++ kernel, the
AVX2 build's where the level is above it, SDPA (longer prompts than max_batch_tokens are chunked
prefills, whose later chunks attend the earlier ones in the pages); with --kernel it times the
kernel alone against SDPA on one layer's random inputs.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import sgrun
from sgrun.kernels.cpu.prefill_attention import bf16_from as prefill_cpp_bf16_from
from sgrun.models import quant_linear
from bench_options import add_dtype, add_quantization, add_threads, load_avg, machine_line

MATMUL = ("aten::linear", "aten::mm", "aten::addmm", "aten::matmul", "aten::_weight_int8pack_mm",
          "aten::_weight_int4pack_mm_for_cpu")
ELEMENTWISE = ("aten::rms_norm", "aten::_fused_rms_norm", "aten::mul", "aten::add", "aten::cat", "aten::neg",
               "aten::silu", "aten::addcmul", "aten::sub", "aten::copy_", "aten::to", "aten::_to_copy")
REGIONS = {"sgrun::attention": "attention (KV write + prefill attention)",
           "sgrun::dequantize": "weight dequantization (per linear per chunk)",
           "sgrun::blocks": "C++ blocks (int4 linears, norms, RoPE, MLP: decode_block.cpp)"}


def wrap(obj, name: str, region: str) -> None:
    orig = getattr(obj, name)

    def wrapped(*a, **k):
        with record_function(region):
            return orig(*a, **k)
    setattr(obj, name, wrapped)


def wrap_forward_for(runner) -> None:
    """Every forward the runner picks (the C++ blocks' `fused.forward`, a compiled graph, or eager
    model.forward: model_runner.forward_for) runs inside the sgrun::model_forward region."""
    pick = runner.forward_for

    def forward_for(num_tokens: int):
        forward = pick(num_tokens)

        def wrapped(*a, **k):
            with record_function("sgrun::model_forward"):
                return forward(*a, **k)
        return wrapped
    runner.forward_for = forward_for


def breakdown(prof) -> dict[str, float]:
    """ms by category, from the event tree (self times, so nothing counts twice)."""
    out: dict[str, float] = defaultdict(float)
    forward_total = covered = 0.0
    for ev in prof.events():
        if ev.name == "sgrun::model_forward":
            forward_total += ev.cpu_time_total / 1e3
    for ev in prof.events():
        if ev.name in REGIONS:
            if _inside(ev, "sgrun::model_forward") and not _inside_any(ev, REGIONS):
                out[REGIONS[ev.name]] += ev.cpu_time_total / 1e3
                covered += ev.cpu_time_total / 1e3
            continue
        if not ev.name.startswith("aten::") or not _inside(ev, "sgrun::model_forward") or _inside_any(ev, REGIONS):
            continue
        top = ev.cpu_parent is None or not ev.cpu_parent.name.startswith("aten::")
        if ev.name in MATMUL:
            cat = "GEMMs (bf16, dense or dequantized weights)"
        elif ev.name in ELEMENTWISE:
            cat = "norm/RoPE/activation/casts"
        else:
            cat = "other tensor ops"
        out[cat] += ev.self_cpu_time_total / 1e3
        if top:
            covered += ev.cpu_time_total / 1e3
    out["Python / dispatch (forward time not inside any op)"] = forward_total - covered
    out["_total"] = forward_total
    return out


def _inside(ev, name: str) -> bool:
    p = ev.cpu_parent
    while p is not None:
        if p.name == name:
            return True
        p = p.cpu_parent
    return False


def _inside_any(ev, names) -> bool:
    return any(_inside(ev, n) for n in names)


def time_kernel(length: int, threads: int, heads: tuple[int, int, int] = (9, 3, 64), page_size: int = 16) -> None:
    """One layer's causal prefill of `length` tokens (no earlier context), bf16: the C++ kernel
    and SDPA, best of 7, as wall time and as CPU time per thread (time.process_time / threads,
    which other tenants' load does not inflate the way it does wall time)."""
    import torch.nn.functional as F
    from sgrun.kernels.cpu.prefill_attention import load_kernel, use_amx
    op = load_kernel()
    H, KV, D = heads
    pages = -(-length // page_size)
    k_cache = torch.randn(KV, pages, page_size, D).bfloat16()
    v_cache = torch.randn(KV, pages, page_size, D).bfloat16()
    q = torch.randn(length, H, D).bfloat16()
    out = torch.empty_like(q)
    meta = [torch.tensor([x]) for x in (0, length, length)]
    table = torch.arange(pages)[None]
    ks, vs = (c.reshape(KV, -1, D)[:, :length][None] for c in (k_cache, v_cache))
    calls = {"SDPA": lambda: F.scaled_dot_product_attention(q.transpose(0, 1)[None], ks, vs, is_causal=True,
                                                            enable_gqa=True)}
    if op is not None:
        calls["C++ prefill kernel"] = lambda: op.prefill_attention(q, k_cache, v_cache, table, *meta, D ** -0.5,
                                                                   out, False, prefill_cpp_bf16_from(), False, 0)
        if use_amx(op):   # the same walk with its products on AMX tiles, as the amx level runs it
            calls["C++ prefill kernel, AMX tiles"] = lambda: op.prefill_attention(
                q, k_cache, v_cache, table, *meta, D ** -0.5, out, False, prefill_cpp_bf16_from(), True, 0)
    flop = H * length * (length + 1) / 2 * D * 4
    for name, call in calls.items():
        call()
        wall = cpu = float("inf")
        for _ in range(7):
            t, c = time.perf_counter(), time.process_time()
            call()
            wall, cpu = min(wall, time.perf_counter() - t), min(cpu, (time.process_time() - c) / threads)
        print(f"[{length} tokens, {H}/{KV} heads x {D}] {name:<20} wall {wall * 1e3:7.2f} ms, CPU per thread "
              f"{cpu * 1e3:7.2f} ms ({flop / cpu / threads / 1e9:.0f} GFLOP/s per thread)  (load {load_avg()})")


def prefill_paths(engine: sgrun.Engine) -> dict[str, object]:
    """The prefill attention paths this CPU has for the engine's pool, the level's own first:
    name -> the value of the backend's `prefill_op` that runs it (None: SDPA)."""
    from sgrun.kernels.cpu import isa
    from sgrun.kernels.cpu import prefill_attention as prefill_cpp
    attn = engine.runner.attn
    dtype = prefill_cpp.dtype_name(engine.runner.model.dtype)
    paths: dict[str, object] = {}
    if getattr(attn, "prefill_op", None) is not None:
        level = isa.active_level().name
        paths[f"C++ {level} build ({attn.prefill_op.fast_path(dtype, attn.D)} path)"] = attn.prefill_op
        if level != "avx2" and isa.level_named("avx2") in isa.supported_levels():
            op = prefill_cpp.load_kernel("avx2")
            if op is not None and op.fast_path(dtype, attn.D):
                paths[f"C++ avx2 build ({op.fast_path(dtype, attn.D)} path)"] = op
    paths["SDPA"] = None
    return paths


def compare_paths(engine: sgrun.Engine, lengths: list[int], rng: random.Random, params) -> None:
    """TTFT with each prefill attention path (prefill_paths), 3 interleaved rounds after one
    warm-up each; prompts over max_batch_tokens run as chunked prefills."""
    attn = engine.runner.attn
    chosen = getattr(attn, "prefill_op", None)
    paths = prefill_paths(engine)
    try:
        for length in lengths:
            times: dict[str, list[float]] = {name: [] for name in paths}
            for i in range(4):
                prompt = [rng.randrange(100, 40000) for _ in range(length)]
                for name, op in paths.items():
                    attn.prefill_op = op
                    engine.flush_cache()
                    t = engine.generate([prompt], params)[0].ttft
                    if i:   # round 0 is the warm-up
                        times[name].append(t)
            med = {k: statistics.median(v) for k, v in times.items()}
            first = next(iter(med.values()))
            print(f"[{length} tokens, chunks of {engine.scheduler.max_batch_tokens}] TTFT median of 3: "
                  + ", ".join(f"{k} {v * 1e3:.0f} ms ({', '.join(f'{x * 1e3:.0f}' for x in times[k])}; "
                              f"first / this {first / v:.2f}x)" for k, v in med.items())
                  + f"  (load {load_avg()})")
    finally:
        attn.prefill_op = chosen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="512,2048")
    add_quantization(ap, "int4,none", several=True)
    add_threads(ap)
    add_dtype(ap, "auto")   # what a user gets (auto_config.py); bf16 to profile the bf16 model
    ap.add_argument("--attention-backend", default=None, help="cpp | torch (default: the engine's)")
    ap.add_argument("--top", type=int, default=0, help="also list the N ops with the most self time")
    ap.add_argument("--kernel", action="store_true",
                    help="only time the prefill kernel alone (one layer, SmolLM2's heads) against SDPA")
    ap.add_argument("--compare-paths", "--compare-sdpa", dest="compare_paths", action="store_true",
                    help="only time TTFT with each prefill attention path (the level's, AVX2's, SDPA), interleaved")
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    torch.set_num_threads(args.threads)
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__}, {args.threads} threads, load {load_avg()}")
    for cls in (quant_linear.Int4Linear, quant_linear.Int8Linear):
        wrap(cls, "dequantized", "sgrun::dequantize")
    rng = random.Random(0)
    if args.kernel:
        for length in map(int, args.lengths.split(",")):
            time_kernel(length, args.threads)
        return
    for quant in args.quantization.split(","):
        engine = sgrun.Engine(dtype=args.dtype, num_threads=args.threads, quantization=quant,
                              attention_backend=args.attention_backend)
        print(f"\nsgrun {quant}, dtype {engine.dtype}, attention backend {engine.runner.backend}")
        wrap_forward_for(engine.runner)
        wrap(engine.runner.attn, "forward", "sgrun::attention")
        if engine.runner.fused is not None:   # the C++ blocks between attention calls (decode_block.cpp)
            wrap(engine.runner.fused.module, "decode_block_run", "sgrun::blocks")
        params = sgrun.SamplingParams(max_new_tokens=1, temperature=0)
        if args.compare_paths:
            compare_paths(engine, [int(x) for x in args.lengths.split(",")], rng, params)
            engine.close()
            continue
        for length in map(int, args.lengths.split(",")):
            prompts = [[rng.randrange(100, 40000) for _ in range(length)] for _ in range(4)]
            ttfts = []
            for p in prompts[:3]:
                engine.flush_cache()
                ttfts.append(engine.generate([p], params)[0].ttft)
            engine.flush_cache()
            # A compiled graph calls no Python wrapper and shows no per-op breakdown, so the profiled
            # request runs without one (the C++ blocks or eager); the unprofiled TTFTs are the engine's own.
            runner = engine.runner
            compiled, runner.compiled = runner.compiled, None
            prof = profile(activities=[ProfilerActivity.CPU])
            engine.run_on_loop(prof.__enter__)
            t = time.perf_counter()
            try:
                engine.generate([prompts[3]], params)
            finally:
                runner.compiled = compiled
            wall = time.perf_counter() - t
            engine.run_on_loop(lambda: prof.__exit__(None, None, None))
            parts = breakdown(prof)
            total = parts.pop("_total")
            print(f"[{quant}, {length} tokens] TTFT {statistics.median(ttfts) * 1e3:.0f} ms unprofiled (median of 3: "
                  f"{', '.join(f'{x * 1e3:.0f}' for x in ttfts)}); profiled forward (eager) {total:.0f} ms, "
                  f"request {wall * 1e3:.0f} ms  (load {load_avg()})")
            if total <= 0:
                raise SystemExit("the profiled request ran no model.forward: the engine's forward path changed "
                                 "(model_runner.forward_for); update this benchmark's wrappers")
            for name, ms in sorted(parts.items(), key=lambda kv: -kv[1]):
                print(f"  {name:<52} {ms:8.1f} ms  {100 * ms / total:5.1f}%")
            if args.top:
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))
        engine.close()


if __name__ == "__main__":
    main()
