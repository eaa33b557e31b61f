"""Engine benchmark, side by side with Hugging Face transformers on the same dequantized weights.

    python benchmarks/bench_engine.py [--dtype bfloat16] [--threads 2] [--parts decode,ttft,throughput,overhead]

Prints single-stream decode tok/s, TTFT at 512 and 2048 prompt tokens, aggregate throughput for
64 mixed requests (engine, transformers one at a time, transformers static batches of 16) and
the engine's own overhead per decode step at batch 1 and 32, plus the machine load.
"""

from __future__ import annotations

import argparse
import os
import random
import time

import torch

import sgrun
from sgrun.models.fetch import default_model_path


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def hf_model(dtype):
    import transformers
    path = default_model_path()
    m = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    return m.eval()


def random_ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(100, 40000) for _ in range(n)]


@torch.inference_mode()
def hf_generate(model, batch: list[list[int]], new_tokens: int) -> tuple[float, int]:
    """Static batch, left-padded; returns (seconds, useful output tokens)."""
    width = max(len(p) for p in batch)
    ids = torch.full((len(batch), width), 2, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(batch):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    t = time.perf_counter()
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                   do_sample=False, pad_token_id=2)
    return time.perf_counter() - t, new_tokens * len(batch)


def bench_decode(engine, model, rng) -> None:
    prompt = random_ids(rng, 32)
    n = 128
    params = sgrun.SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True)
    engine.generate([prompt], params.replace(max_new_tokens=4))
    out = engine.generate([prompt], params)[0]
    ours = (n - 1) / (out.finish_time - out.first_token_time)
    hf_generate(model, [prompt], 4)
    t1, _ = hf_generate(model, [prompt], 1)
    tn, _ = hf_generate(model, [prompt], n)
    theirs = (n - 1) / (tn - t1)
    print(f"single-stream decode: sgrun {ours:.1f} tok/s, transformers {theirs:.1f} tok/s, ratio {ours / theirs:.2f}x  (load {load_avg()})")


def bench_ttft(engine, model, rng) -> None:
    for length in (512, 2048):
        prompt = random_ids(rng, length)
        engine.flush_cache()
        out = engine.generate([prompt], sgrun.SamplingParams(max_new_tokens=1, temperature=0))[0]
        ours = out.ttft
        theirs, _ = hf_generate(model, [random_ids(rng, length)], 1)
        print(f"TTFT {length} tokens: sgrun {ours:.3f} s, transformers {theirs:.3f} s, ratio {ours / theirs:.2f}x  (load {load_avg()})")


def mixed_workload(rng, count=64):
    return [(random_ids(rng, rng.randint(64, 1024)), rng.randint(16, 256)) for _ in range(count)]


def bench_throughput(engine, model, rng, sequential_sample: int) -> None:
    work = mixed_workload(rng)
    total_out = sum(n for _, n in work)
    engine.flush_cache()
    t = time.perf_counter()
    handles = [engine.submit(p, sgrun.SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True)) for p, n in work]
    for h in handles:
        h.result()
    ours = total_out / (time.perf_counter() - t)
    print(f"aggregate, 64 mixed requests at once: sgrun {ours:.1f} output tok/s  (load {load_avg()})")
    # transformers one at a time: measured on a sample of the requests, rate = tokens / seconds.
    secs = toks = 0
    for p, n in work[:sequential_sample]:
        s, k = hf_generate(model, [p], n)
        secs += s
        toks += k
    seq = toks / secs
    print(f"  transformers one at a time ({sequential_sample} of 64 requests): {seq:.1f} tok/s -> ratio {ours / seq:.1f}x  (load {load_avg()})")
    secs = toks = 0
    for i in range(0, len(work), 16):
        chunk = work[i:i + 16]
        longest = max(n for _, n in chunk)
        s, _ = hf_generate(model, [p for p, _ in chunk], longest)
        secs += s
        toks += sum(n for _, n in chunk)  # only the tokens each request asked for count
    static = toks / secs
    print(f"  transformers static batches of 16: {static:.1f} tok/s -> ratio {ours / static:.2f}x  (load {load_avg()})")


def bench_overhead(engine, rng) -> None:
    for batch in (1, 32):
        prompts = [random_ids(rng, 64) for _ in range(batch)]
        params = sgrun.SamplingParams(max_new_tokens=64, temperature=0, ignore_eos=True)
        engine.generate(prompts, params.replace(max_new_tokens=2))
        s0, m0, n0 = engine.step_time_total, engine.runner.model_time, engine.num_steps
        engine.generate(prompts, params)
        steps = engine.num_steps - n0
        step = (engine.step_time_total - s0) / steps
        model = (engine.runner.model_time - m0) / steps
        print(f"decode step at batch {batch}: {step * 1e3:.2f} ms, model forward {model * 1e3:.2f} ms, "
              f"engine overhead {100 * (step - model) / step:.1f}%  (load {load_avg()})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parts", default="decode,ttft,throughput,overhead")
    ap.add_argument("--sequential-sample", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    parts = args.parts.split(",")
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__}, {args.threads} threads, dtype {args.dtype}, load {load_avg()}")
    engine = sgrun.Engine(dtype=dtype, num_threads=args.threads)
    model = hf_model(dtype) if set(parts) & {"decode", "ttft", "throughput"} else None
    rng = random.Random(0)
    if "decode" in parts:
        bench_decode(engine, model, rng)
    if "ttft" in parts:
        bench_ttft(engine, model, rng)
    if "overhead" in parts:
        bench_overhead(engine, rng)
    if "throughput" in parts:
        bench_throughput(engine, model, rng, args.sequential_sample)
    engine.close()


if __name__ == "__main__":
    main()
