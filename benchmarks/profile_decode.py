"""Where a decode step's time goes: torch.profiler over whole engine steps at batch 1 and 32.

    python benchmarks/profile_decode.py [--quantization none,int4] [--batches 1,32] [--threads 2]
                                        [--context 64] [--attention-backend cpp|torch]

For each setting it prints the step's wall time without the profiler, then the profiled
breakdown: matmuls, the C++ blocks between attention calls (decode_block.cpp: the int4 linears,
norms, RoPE, the MLP), attention gathers (page copies), attention math, KV writes, norm / RoPE /
activation elementwise ops, other tensor ops, sampling, and Python (time inside the step not
covered by any op). Next to it, the roofline: the bytes one step must read (weights + KV) over
the memory bandwidth measured here, in the same run.

The unprofiled step is the engine's own. An all-decode batch there runs every layer, attention
and lm_head included, in one C++ call (decode_forward / decode_logits), which shows no parts to a
profiler; the profiled steps turn that call off (the backend's `decode_forward_args` -> None), so
the blocks and the attention kernel run, and are timed, once per layer: the profiled step is the
sum of the parts the one call fuses, a little slower than it.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import sgrun
from bench_options import add_dtype, add_quantization, add_threads, load_avg, read_bandwidth_gbs, machine_line

CATEGORIES = {
    "matmul": ("aten::linear", "aten::mm", "aten::addmm", "aten::matmul", "aten::_weight_int8pack_mm",
               "aten::_weight_int4pack_mm_for_cpu", "sgrun::int4_mm", "sgrun::bf16_mm", "sgrun::int8_mm_f32"),
    "attention gather": ("aten::index_select",),
    "attention math": ("aten::bmm", "aten::_softmax", "aten::softmax", "aten::scaled_dot_product_attention",
                       "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::masked_fill_"),
    "KV write": ("aten::index_put_", "aten::_index_put_impl_"),
    "compiled blocks (fused norm/RoPE/activation)": ("Torch-Compiled Region", "CompiledFunction"),
    "C++ blocks (int4 linears, norms, RoPE, MLP: decode_block.cpp)": ("sgrun::blocks",),
    "norm/RoPE/activation": ("aten::rms_norm", "aten::_fused_rms_norm", "aten::mul", "aten::add", "aten::cat",
                             "aten::neg", "aten::silu", "aten::addcmul", "aten::sub"),
}


def category(name: str) -> str:
    for cat, names in CATEGORIES.items():
        if name in names:
            return cat
    if is_sgrun_matmul(name):
        return "matmul"
    return "other tensor ops"


def is_sgrun_matmul(name: str) -> bool:
    """sgrun's matmul ops are registered per CPU level (matmul.py): sgrun::int8_mm_f32_avx2, ..."""
    return any(name.startswith(op + "_") for op in CATEGORIES["matmul"] if op.startswith("sgrun::"))


def weight_bytes(model) -> int:
    lins = [model.lm_head] + [l for lw in model.layers for l in (lw.qkv, lw.o, lw.gate_up, lw.down)]
    return sum(l.nbytes() for l in lins)


def profile_setting(engine: sgrun.Engine, batch: int, rng: random.Random, context: int = 64, steps: int = 16) -> dict:
    prompts = [[rng.randrange(100, 40000) for _ in range(context)] for _ in range(batch)]
    params = sgrun.SamplingParams(max_new_tokens=steps + 8, temperature=0, ignore_eos=True)
    engine.generate(prompts, params.replace(max_new_tokens=2))           # warm-up
    # Unprofiled step time of pure decode steps (the first 2 steps include the prefill).
    counts = {"n": 0, "t": 0.0, "profile": False}
    orig_step, orig_forward_for, orig_sample = engine.step, engine.runner.forward_for, engine.runner.run_sampling
    fused = engine.runner.fused

    def step() -> None:
        counts["n"] += 1
        t = time.perf_counter()
        if counts["profile"] and counts["n"] > 2:
            with record_function("sgrun::step"):
                orig_step()
        else:
            orig_step()
        if counts["n"] > 2:
            counts["t"] += time.perf_counter() - t

    def forward_for(num_tokens: int):   # whichever forward the runner picks: C++ blocks, compiled graph, eager
        forward = orig_forward_for(num_tokens)

        def wrapped(*a, **k):
            with record_function("sgrun::model_forward"):
                return forward(*a, **k)
        return wrapped

    def sample(*a, **k):
        with record_function("sgrun::sampling"):
            return orig_sample(*a, **k)

    attn = engine.runner.attn
    # The all-decode fast path calls the kernel without _attend_decodes (cpp_backend.py).
    attend_name = "_run_decode_kernel" if hasattr(attn, "_run_decode_kernel") else "_attend_decodes"
    orig_attend = getattr(attn, attend_name)

    def attend(*a, **k):   # the C++ kernel is no aten op: its time is this region's
        with record_function("sgrun::decode_attention"):
            return orig_attend(*a, **k)

    orig_blocks = fused.module.decode_block_run if fused is not None else None

    def blocks(*a, **k):   # one C++ block between attention calls: no aten op inside
        with record_function("sgrun::blocks"):
            return orig_blocks(*a, **k)

    engine.step, engine.runner.forward_for, engine.runner.run_sampling = step, forward_for, sample
    setattr(attn, attend_name, attend)
    try:
        engine.generate(prompts, params)
        plain_ms = counts["t"] / max(1, counts["n"] - 2) * 1e3
        counts.update(n=0, t=0.0, profile=True)
        if hasattr(attn, "decode_forward_args"):   # the parts, per layer (the module docstring)
            attn.decode_forward_args = lambda dtype: None
        if fused is not None:
            fused.module.decode_block_run = blocks
        prof = profile(activities=[ProfilerActivity.CPU])
        engine.run_on_loop(prof.__enter__)
        engine.generate(prompts, params)
        engine.run_on_loop(lambda: prof.__exit__(None, None, None))
    finally:
        del engine.step, engine.runner.forward_for, engine.runner.run_sampling  # back to the class methods
        if "decode_forward_args" in vars(attn):
            del attn.decode_forward_args
        if fused is not None:
            fused.module.decode_block_run = orig_blocks
        delattr(attn, attend_name)
    return {"plain_ms": plain_ms, "steps": max(1, counts["n"] - 2), "prof": prof}


def breakdown(prof, steps: int) -> dict[str, float]:
    """ms per step by category, from the event tree (self times, so nothing counts twice)."""
    events = prof.events()
    out: dict[str, float] = defaultdict(float)
    region_total = {"sgrun::step": 0.0, "sgrun::model_forward": 0.0, "sgrun::sampling": 0.0,
                    "sgrun::decode_attention": 0.0}
    attn_ops = 0.0   # top-level aten ops inside decode attention (the rest of it is the kernel call)
    for ev in events:
        if ev.name in region_total:
            region_total[ev.name] += ev.cpu_time_total / 1e3
    for ev in events:
        if not (ev.name.startswith("aten::") or ev.name in CATEGORIES["matmul"] or is_sgrun_matmul(ev.name)
                or ev.name == "sgrun::blocks"):
            continue
        parent, regions = ev.cpu_parent, set()
        top = parent is None or not parent.name.startswith("aten::")
        while parent is not None:
            regions.add(parent.name)
            parent = parent.cpu_parent
        if "sgrun::step" not in regions:
            continue
        if "sgrun::sampling" in regions:
            out["sampling (ops)"] += ev.self_cpu_time_total / 1e3
        elif "sgrun::decode_attention" in regions:
            out["decode attention (kernel or gather + bmm, with its ops)"] += ev.self_cpu_time_total / 1e3
            if top:
                attn_ops += ev.cpu_time_total / 1e3
        elif "sgrun::model_forward" in regions:
            out[category(ev.name)] += ev.self_cpu_time_total / 1e3
        else:
            out["engine tensor ops (batch build, masks)"] += ev.self_cpu_time_total / 1e3
        if top:
            out["_covered"] += ev.cpu_time_total / 1e3
    kernel = region_total["sgrun::decode_attention"] - attn_ops   # the C++ call and its Python around it
    out["decode attention (kernel or gather + bmm, with its ops)"] += kernel
    out["Python / dispatch (step time not inside any op)"] = region_total["sgrun::step"] - out.pop("_covered") - kernel
    out["_step_total"] = region_total["sgrun::step"]
    return {k: v / steps for k, v in out.items()}


def top_events(prof, steps: int, n: int) -> list[tuple[str, float]]:
    """Self CPU time per step by event name, over every event inside a step."""
    totals: dict[str, float] = defaultdict(float)
    for ev in prof.events():
        parent = ev.cpu_parent
        while parent is not None and parent.name != "sgrun::step":
            parent = parent.cpu_parent
        if parent is not None:
            totals[ev.name] += ev.self_cpu_time_total / 1e3 / steps
    return sorted(totals.items(), key=lambda kv: -kv[1])[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    add_quantization(ap, "none,int4", several=True)
    ap.add_argument("--batches", default="1,32")
    add_threads(ap)
    add_dtype(ap, "bfloat16")
    ap.add_argument("--compile", default="on", help="on, off or on,off: the engine's compile switch")
    ap.add_argument("--context", type=int, default=64, help="prompt tokens per request")
    ap.add_argument("--attention-backend", default=None, help="cpp | torch (default: the engine's)")
    ap.add_argument("--top", type=int, default=0, help="also print the N events with the most self time per step")
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    torch.set_num_threads(args.threads)
    bw = read_bandwidth_gbs()
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__}, {args.threads} threads, "
          f"measured read bandwidth {bw:.1f} GB/s, load {load_avg()}")
    batches = [int(b) for b in args.batches.split(",")]
    for quant, comp in [(q, c) for q in args.quantization.split(",") for c in args.compile.split(",")]:
        engine = sgrun.Engine(dtype=args.dtype, num_threads=args.threads, quantization=quant, compile=comp == "on",
                              attention_backend=args.attention_backend, max_running=max(64, *batches),
                              # 23,040 B: a token of SmolLM2-135M bf16 KV (30 layers x 3 kv heads x 64 x K,V x 2 B)
                              memory_gb=max(1.0, 1.3 * max(batches) * (args.context + 40) * 23_040 / 2**30))
        cfg = engine.config
        wbytes = weight_bytes(engine.model)
        print(f"attention backend: {engine.runner.backend}")
        for batch in batches:
            r = profile_setting(engine, batch, random.Random(batch), args.context)
            kv = batch * (args.context + 16) * 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * engine.pool.k[0].element_size()
            roof = (wbytes + kv) / (bw * 1e9) * 1e3
            parts = breakdown(r["prof"], r["steps"])
            total = parts.pop("_step_total")
            print(f"\n[{quant}, compile {comp}, batch {batch}] step {r['plain_ms']:.1f} ms unprofiled, {total:.1f} ms profiled; "
                  f"roofline {roof:.1f} ms ({wbytes / 1e6:.0f} MB weights + {kv / 1e6:.1f} MB KV at {bw:.1f} GB/s)"
                  f"  (load {load_avg()})")
            for name, ms in sorted(parts.items(), key=lambda kv_: -kv_[1]):
                print(f"  {name:<50} {ms:7.2f} ms  {100 * ms / total:5.1f}%")
            if args.top:
                print(f"  top {args.top} events by self time per step (any name, incl. compiled graphs):")
                for name, ms in top_events(r["prof"], r["steps"], args.top):
                    print(f"    {name[:70]:<70} {ms:7.2f} ms")
        engine.close()


if __name__ == "__main__":
    main()
