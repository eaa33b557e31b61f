"""bf16 stays close to the float32 reference: float32 residual stream, norms and lm_head, and
float32 decode q.k scores (benchmarks/bench_bf16_accuracy.py measures the full 30-prompt set;
these few prompts hold the same targets)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from teacher_forced import decode_trace, drift  # noqa: E402  (benchmarks/teacher_forced.py)

PROMPTS = [
    "What is the capital of France?",
    "Name three primary colours.",
    "Why is the sky blue?",
]
STEPS = 16
MAX_MEAN_KL = 0.4e-3
# Where the CPU has no bf16 dot products (AVX2, AVX-512 without BF16) the dense bf16 linears run FMA
# tiles over bf16 weights and ATen's bf16 elementwise ops emulate bf16: measured 0.478e-3 on an
# AVX2-only AMD EPYC (dtype auto picks float32 there; bf16 is asked for explicitly)
MAX_MEAN_KL_WITHOUT_BF16_DOT = 0.6e-3
MIN_EXACT = 2   # of the 3 prompts: the full benchmark's target is >= 25 of 30 (a near-tie may flip one)


def test_bf16_close_to_float32_reference(float32_engine, bf16_engine, tokenizer):
    assert bf16_engine.model.dtype == torch.bfloat16 and float32_engine.model.dtype == torch.float32
    kl_sum, positions, exact = 0.0, 0, 0
    for question in PROMPTS:
        ids = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": question}]))
        ref = decode_trace(float32_engine.model, ids, STEPS, stop_ids=tokenizer.eos_token_ids)
        ours = decode_trace(bf16_engine.model, ids, STEPS, forced=ref.tokens)
        d = drift(ref.logits, ours.logits)
        kl_sum += d.mean_kl * d.positions
        positions += d.positions
        exact += d.exact
    from sgrun.kernels.cpu import isa
    bound = MAX_MEAN_KL if isa.active_level().name in ("avx512_bf16", "amx") else MAX_MEAN_KL_WITHOUT_BF16_DOT
    assert kl_sum / positions <= bound, f"bf16 drifted: mean KL {kl_sum / positions:.3g} > {bound}"
    assert exact >= MIN_EXACT, f"greedy output differs from float32 on {len(PROMPTS) - exact} of {len(PROMPTS)} prompts"


def test_bf16_engine_answers_the_readme_question(bf16_engine, chat_prompt):
    """As the README asks it: the model's recommended sampling with seed 7. (Greedy is a near tie
    here: "L'" at -1.926 against "The" at -1.948 in dense bf16 on an AVX2-only AMD EPYC.)"""
    import sgrun
    out = bf16_engine.generate([chat_prompt("What is the capital of France?")],
                               sgrun.SamplingParams(max_new_tokens=24, temperature=0.2, top_p=0.9, seed=7))[0]
    assert "Paris" in out.text, out.text
