"""bf16 against a float32 reference on 30 chat prompts, teacher-forced along the float32 greedy
path, plus the single-stream decode cost of each bf16 variant, all in one run.

    python benchmarks/bench_bf16_accuracy.py [--prompts 30] [--steps 32] [--threads 2] [--quantization none,int4]

Variants (same weights, same positions), for each quantization of the layer linears (none: dense
bf16; int4: what a Q4 GGUF runs with by default):
  bf16-all    residual stream, final norm and lm_head in bf16, decode q.k in bf16 (the old path)
  bf16        residual stream, norms and lm_head in float32, decode q.k in float32 (the default)
The reference is float32, dense, on the same dequantized file weights.
Prints mean KL(float32 || variant), top-1 agreement, how many prompts' greedy output is
identical to float32's, and decode ms per token (decode-step forwards only, the variants
interleaved prompt by prompt so machine load hits both alike), plus the load average.
"""

from __future__ import annotations

import argparse

import torch

from teacher_forced import decode_trace, drift  # the script's folder (benchmarks/) is on sys.path
from sgrun.models.fetch import default_model_path
from sgrun.models.llama import LlamaModel
from sgrun.models.loader import load_model_files
from bench_options import add_quantization, add_threads, load_avg, machine_line

# Thirty everyday chat requests of a new user: facts, arithmetic, definitions, short writing,
# code. The first is the README's.
CHAT_PROMPTS = [
    "What is the capital of France?",
    "What is 12 plus 30?",
    "Name three primary colours.",
    "Who wrote Romeo and Juliet?",
    "Explain photosynthesis in one sentence.",
    "Translate 'good morning' into Spanish.",
    "Write a haiku about the sea.",
    "What is the boiling point of water in Celsius?",
    "Give me a synonym for 'happy'.",
    "How many days are there in a leap year?",
    "What does CPU stand for?",
    "Write a Python function that returns the square of a number.",
    "What is the largest planet in the solar system?",
    "Suggest a name for a pet cat.",
    "Why is the sky blue?",
    "List the days of the week.",
    "What is the chemical symbol for gold?",
    "Summarise the plot of Cinderella in two sentences.",
    "How do I reverse a list in Python?",
    "What is the opposite of 'cold'?",
    "Who painted the Mona Lisa?",
    "What are the three states of matter?",
    "Give me a tip for sleeping better.",
    "What is the square root of 81?",
    "What language is spoken in Brazil?",
    "Write a short greeting for a birthday card.",
    "What is an adjective?",
    "How many continents are there?",
    "What is the freezing point of water in Fahrenheit?",
    "Recommend a healthy breakfast.",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=30)
    ap.add_argument("--steps", type=int, default=32, help="max tokens of each float32 greedy answer")
    add_threads(ap)
    add_quantization(ap, "none,int4", several=True)
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    torch.set_num_threads(args.threads)
    loaded = load_model_files(default_model_path(), torch.float32)
    tok = loaded.tokenizer
    ref = LlamaModel(loaded.config, loaded.weights, torch.float32)
    variants = {}
    for q in args.quantization.split(","):
        suffix = "" if q == "none" else f" {q}"
        variants[f"bf16-all{suffix}"] = (LlamaModel(loaded.config, loaded.weights, torch.bfloat16, q,
                                                    residual_dtype=torch.bfloat16), torch.bfloat16)
        variants[f"bf16{suffix}"] = (LlamaModel(loaded.config, loaded.weights, torch.bfloat16, q), torch.float32)
    warm = tok.encode("Hello")
    for model, score_dtype in variants.values():   # first-call kernel set-up is not decode cost
        decode_trace(model, warm, 4, score_dtype=score_dtype)
    print(f"load before: {load_avg()}")
    sums = {name: {"kl": 0.0, "top1": 0.0, "exact": 0, "secs": 0.0, "steps": 0} for name in variants}
    positions = 0
    for i, question in enumerate(CHAT_PROMPTS[: args.prompts]):
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": question}]))
        base = decode_trace(ref, ids, args.steps, stop_ids=tok.eos_token_ids)
        positions += len(base.tokens)
        order = list(variants.items())
        for name, (model, score_dtype) in (order if i % 2 else order[::-1]):
            trace = decode_trace(model, ids, args.steps, forced=base.tokens, score_dtype=score_dtype)
            d = drift(base.logits, trace.logits)
            s = sums[name]
            s["kl"] += d.mean_kl * d.positions
            s["top1"] += d.top1 * d.positions
            s["exact"] += d.exact
            s["secs"] += trace.decode_seconds
            s["steps"] += len(trace.tokens) - 1
    n = min(args.prompts, len(CHAT_PROMPTS))
    print(f"{n} prompts, {positions} teacher-forced positions; load after: {load_avg()}")
    print("| variant | mean KL | top-1 | exact greedy | decode ms/token |")
    print("|---|---|---|---|---|")
    for name, s in sums.items():
        print(f"| {name} | {s['kl'] / positions:.3g} | {100 * s['top1'] / positions:.1f}% | "
              f"{s['exact']}/{n} | {1e3 * s['secs'] / s['steps']:.2f} |")
    names = list(sums)
    for old, new in zip(names[::2], names[1::2]):
        all_ms, new_ms = (sums[k]["secs"] / sums[k]["steps"] for k in (old, new))
        print(f"decode cost of {new!r} over {old!r}: {100 * (new_ms / all_ms - 1):+.1f}%")


if __name__ == "__main__":
    main()
