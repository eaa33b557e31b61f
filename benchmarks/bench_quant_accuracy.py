"""Perplexity of a fixed text under each weight setting, next to llama.cpp on the same file.

    python benchmarks/bench_quant_accuracy.py [--model PATH] [--tokens 512]

Every system scores the same token ids (sgrun's tokenizer) of benchmarks/data/perplexity_text.txt
(an original passage written for this benchmark), one forward over the whole text, no BOS.
sgrun runs bf16 activations with weights dense (the file dequantized), int8 or int4; llama.cpp
runs the GGUF as stored (Q4_1 layers, Q8_0 embedding).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import math  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import sgrun  # noqa: E402
from sgrun.models.fetch import resolve_model_path  # noqa: E402
from bench_options import add_threads, load_avg, machine_line  # noqa: E402

TEXT = Path(__file__).parent / "data" / "perplexity_text.txt"


def sgrun_ppl(model: Path, ids: list[int], quantization: str, dtype: str) -> float:
    with sgrun.Engine(str(model), dtype=dtype, quantization=quantization, memory_gb=0.2) as engine:
        lp = engine.score(ids[:1], [ids[1:]])[0]
    return math.exp(-sum(lp) / len(lp))


def llama_cpp_ppl(model: Path, ids: list[int], threads: int) -> float | None:
    try:
        import llama_cpp
    except ImportError:
        return None
    llm = llama_cpp.Llama(str(model), n_threads=threads, n_ctx=max(1024, len(ids) + 8), n_batch=len(ids),
                          n_ubatch=len(ids), logits_all=True, verbose=False)
    llm.reset()
    llm.eval(ids)
    logits = np.asarray(llm.scores[: len(ids) - 1], dtype=np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    nll = -logp[np.arange(len(ids) - 1), ids[1:]].mean()
    return math.exp(nll)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--tokens", type=int, default=512)
    add_threads(ap)
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    torch.set_num_threads(args.threads)
    model = resolve_model_path(args.model)
    from sgrun.models.loader import load_tokenizer
    ids = load_tokenizer(model).encode(TEXT.read_text(), add_bos=False)[: args.tokens]
    print(f"{model.name}, {len(ids)} tokens of {TEXT.name}, load {load_avg()}")
    for dtype, quant in (("float32", "none"), ("bfloat16", "none"), ("bfloat16", "int8"), ("bfloat16", "int4")):
        print(f"  sgrun {dtype:<8} weights {quant:<5}: perplexity {sgrun_ppl(model, ids, quant, dtype):.3f}")
    lc = llama_cpp_ppl(model, ids, args.threads)
    print(f"  llama.cpp (file as stored)     : perplexity {lc:.3f}" if lc else "  llama.cpp: not installed")


if __name__ == "__main__":
    main()
