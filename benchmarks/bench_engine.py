"""Engine benchmark: sgrun side by side with its peers, in one process, interleaved.

    python benchmarks/bench_engine.py [--threads 2] [--parts decode,ttft,throughput,overhead]
                                      [--quantization none,int8,int4] [--compile on|off|off,on] [--rounds 3]

Peers, all on the same SmolLM2 Q4_1 file and the same thread count:
- transformers on dense bf16 weights: a safetensors folder saved from sgrun's own dequantized
  weights (transformers' GGUF loader keeps weights packed and is several times slower, so it is
  the wrong peer);
- llama-cpp-python on the GGUF itself (if installed).

Decode and TTFT are measured in rounds that alternate the systems, and the median round is
reported, so a load spike from the machine's other tenants hits every system alike. The load
average is printed with every line. OMP_WAIT_POLICY=PASSIVE is set for the whole process
(torch and llama.cpp both use OpenMP): on this oversubscribed machine a spinning OpenMP worker
whose partner thread is descheduled makes llama.cpp ~30x slower, which would measure the
machine, not the runtime.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

import sgrun  # noqa: E402
from sgrun.models.fetch import default_model_path  # noqa: E402
from bench_options import add_quantization, add_rounds, add_threads, load_avg, machine_line  # noqa: E402


def dense_folder(gguf: Path) -> Path:
    """A Hugging Face folder (config.json + bf16 safetensors) of sgrun's dequantized weights."""
    from safetensors.torch import save_file

    from sgrun.models.loader import load_model_files
    out = Path.home() / ".cache" / "sgrun" / "dense" / gguf.stem
    if (out / "model.safetensors").exists():
        return out
    loaded = load_model_files(gguf, torch.float32)
    c = loaded.config
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim,
        "max_position_embeddings": c.max_position, "rms_norm_eps": c.rms_eps, "rope_theta": c.rope_theta,
        "rope_scaling": c.rope_scaling, "tie_word_embeddings": c.tie_embeddings, "hidden_act": "silu",
        "attention_bias": c.qkv_bias, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in loaded.weights.items()
               if not (c.tie_embeddings and k == "lm_head.weight")}, str(out / "model.safetensors"))
    return out


def hf_model(folder: Path):
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16).eval()


def llama_cpp_model(gguf: Path, threads: int):
    try:
        import llama_cpp
    except ImportError:
        print("llama-cpp-python is not installed: its columns are skipped (pip install llama-cpp-python)")
        return None
    return llama_cpp.Llama(str(gguf), n_threads=threads, n_threads_batch=threads, n_ctx=4096,
                           n_batch=512, n_ubatch=512, verbose=False)


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


def lc_decode(llm, prompt: list[int], n: int) -> float:
    """tok/s after the first token (greedy)."""
    count, t1 = 0, 0.0
    for _ in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
        count += 1
        if count == 1:
            t1 = time.perf_counter()
        if count == n:
            break
    return (n - 1) / (time.perf_counter() - t1)


def lc_ttft(llm, prompt: list[int]) -> float:
    t = time.perf_counter()
    for _ in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
        break
    return time.perf_counter() - t


def sg_decode(engine, prompt: list[int], n: int) -> float:
    out = engine.generate([prompt], sgrun.SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True))[0]
    return (n - 1) / (out.finish_time - out.first_token_time)


def hf_decode(model, prompt: list[int], n: int) -> float:
    t1, _ = hf_generate(model, [prompt], 1)
    tn, _ = hf_generate(model, [prompt], n)
    return (n - 1) / (tn - t1)


def report(title: str, results: dict[str, list[float]], unit: str, base: str) -> dict:
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"{title}  (median of {len(next(iter(results.values())))} interleaved rounds, load {load_avg()})")
    for k, v in med.items():
        ratio = v / med[base]
        print(f"  {k:<28} {v:9.3f} {unit}   {ratio:5.2f}x {base}   rounds {[round(x, 3) for x in results[k]]}")
    return med


def bench_decode(engines: dict, hf, llm, rng, rounds: int) -> None:
    prompt, n = random_ids(rng, 32), 128
    runs = {f"sgrun {q}": (lambda e=e: sg_decode(e, prompt, n)) for q, e in engines.items()}
    runs["transformers dense bf16"] = lambda: hf_decode(hf, prompt, n)
    if llm is not None:
        runs["llama.cpp (GGUF Q4_1)"] = lambda: lc_decode(llm, prompt, n)
    for f in runs.values():
        f()  # warm-up
    results: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for k, f in runs.items():
            results[k].append(f())
    med = report("single-stream decode, 32-token prompt, 128 tokens", results, "tok/s", "transformers dense bf16")
    if llm is not None:
        for k in med:
            if k.startswith("sgrun"):
                print(f"  {k} / llama.cpp: {med[k] / med['llama.cpp (GGUF Q4_1)']:.2f}x")


def bench_ttft(engine, hf, llm, rng, rounds: int, lengths: tuple[int, ...]) -> None:
    for length in lengths:
        results: dict[str, list[float]] = {"sgrun": [], "transformers dense bf16": []}
        if llm is not None:
            results["llama.cpp (GGUF Q4_1)"] = []
        # One untimed prompt per system first: the first prefill at a new length pays one-off
        # costs (oneDNN primitive creation for the new GEMM shapes, first-touch of KV pages)
        # that with --rounds 2 would be half of the reported median.
        warm = random_ids(rng, length)
        engine.flush_cache()
        engine.generate([warm], sgrun.SamplingParams(max_new_tokens=1, temperature=0))
        hf_generate(hf, [warm], 1)
        if llm is not None:
            lc_ttft(llm, warm)
        for _ in range(rounds):
            prompt = random_ids(rng, length)
            engine.flush_cache()
            results["sgrun"].append(engine.generate([prompt], sgrun.SamplingParams(max_new_tokens=1, temperature=0))[0].ttft)
            results["transformers dense bf16"].append(hf_generate(hf, [prompt], 1)[0])
            if llm is not None:
                results["llama.cpp (GGUF Q4_1)"].append(lc_ttft(llm, prompt))
        report(f"TTFT, {length}-token prompt (lower is better; ratio = time / transformers)", results, "s",
               "transformers dense bf16")


def bench_throughput(engine, hf, rng, sequential_sample: int, count: int) -> None:
    work = [(random_ids(rng, rng.randint(64, 1024)), rng.randint(16, 256)) for _ in range(count)]
    total_out = sum(n for _, n in work)
    engine.flush_cache()
    t = time.perf_counter()
    handles = [engine.submit(p, sgrun.SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True)) for p, n in work]
    for h in handles:
        h.result()
    ours = total_out / (time.perf_counter() - t)
    print(f"aggregate, {count} mixed requests at once: sgrun {ours:.1f} output tok/s  (load {load_avg()})")
    secs = toks = 0
    for p, n in work[:sequential_sample]:
        s, k = hf_generate(hf, [p], n)
        secs += s
        toks += k
    seq = toks / secs
    print(f"  transformers dense bf16 one at a time ({sequential_sample} of {count} requests): {seq:.1f} tok/s "
          f"-> ratio {ours / seq:.1f}x  (load {load_avg()})")


def bench_overhead(engine, rng) -> None:
    for batch in (1, 32):
        prompts = [random_ids(rng, 64) for _ in range(batch)]
        params = sgrun.SamplingParams(max_new_tokens=64, temperature=0, ignore_eos=True)
        engine.generate(prompts, params.replace(max_new_tokens=2))
        s0, m0, n0 = engine.pipeline.step_time_total, engine.runner.model_time, engine.pipeline.num_steps
        engine.generate(prompts, params)
        steps = engine.pipeline.num_steps - n0
        step = (engine.pipeline.step_time_total - s0) / steps
        model = (engine.runner.model_time - m0) / steps
        print(f"decode step at batch {batch} ({engine.quantization}): {step * 1e3:.2f} ms, model forward "
              f"{model * 1e3:.2f} ms, engine overhead {100 * (step - model) / step:.1f}%  (load {load_avg()})")


def main() -> None:
    ap = argparse.ArgumentParser()
    add_threads(ap)
    ap.add_argument("--parts", default="decode,ttft,throughput,overhead")
    add_quantization(ap, "none,int8,int4", several=True, help="sgrun settings compared in the decode part")
    ap.add_argument("--compile", default="on", help="sgrun's compile switch in the decode part: on, off or off,on")
    add_rounds(ap)
    ap.add_argument("--ttft-lengths", default="512,2048")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--sequential-sample", type=int, default=8)
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    torch.set_num_threads(args.threads)
    parts = args.parts.split(",")
    gguf = default_model_path()
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__}, {args.threads} threads, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, load {load_avg()}")
    hf = hf_model(dense_folder(gguf)) if set(parts) & {"decode", "ttft", "throughput"} else None
    llm = llama_cpp_model(gguf, args.threads) if set(parts) & {"decode", "ttft"} else None
    engines = {}
    for q in args.quantization.split(",") if "decode" in parts else ():
        for c in args.compile.split(","):
            t = time.perf_counter()
            eng = sgrun.Engine(str(gguf), dtype="bfloat16", num_threads=args.threads, quantization=q, memory_gb=0.5,
                               compile=c == "on")
            name = q if args.compile == "on" else f"{q} compile {c}"
            engines[name] = eng
            print(f"sgrun {name}: engine start {time.perf_counter() - t:.1f} s, compile warm-up "
                  f"{eng.startup_report().get('compile_warm_up_s', 0.0):.1f} s  (load {load_avg()})")
    main_engine = sgrun.Engine(str(gguf), dtype="bfloat16", num_threads=args.threads)  # the default: follows the file
    print(f"default engine quantization: {main_engine.quantization}")
    rng = random.Random(0)
    if "decode" in parts:
        bench_decode(engines, hf, llm, rng, args.rounds)
    for e in engines.values():
        e.close()
    if "ttft" in parts:
        bench_ttft(main_engine, hf, llm, rng, args.rounds, tuple(map(int, args.ttft_lengths.split(","))))
    if "overhead" in parts:
        bench_overhead(main_engine, rng)
    if "throughput" in parts:
        bench_throughput(main_engine, hf, rng, args.sequential_sample, args.requests)
    main_engine.close()


if __name__ == "__main__":
    main()
