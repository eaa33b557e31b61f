"""Greedy decoding through the paged engine equals a plain forward that recomputes the whole
sequence with no KV cache (transformers' own GGUF loader and Llama implementation). Both sides
are dense float32 (conftest's `float32_engine`): the claim is exact equality, which int4 or bf16
rounding would turn into a drift bound (benchmarks/bench_quant_accuracy.py measures that)."""

from __future__ import annotations

import pytest
import torch

import sgrun

PROMPTS = [
    "The history of the Roman Empire",
    "def fibonacci(n):\n    ",
    "<|im_start|>user\nList three colours.<|im_end|>\n<|im_start|>assistant\n",
]
STEPS = 32


@pytest.fixture(scope="module")
def reference_model(model_path):
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(model_path.parent), gguf_file=model_path.name, dtype=torch.float32)
    return model.eval()


@torch.inference_mode()
def reference_greedy(model, ids: list[int], steps: int, banned: set[int]):
    """No KV cache: every step runs the whole sequence again. `banned` (EOS, as with
    ignore_eos) is never chosen."""
    ids = list(ids)
    tokens, logprobs = [], []
    for _ in range(steps):
        logits = model(torch.tensor([ids]), use_cache=False).logits[0, -1].float()
        lp = torch.log_softmax(logits, dim=-1)
        tok = int(logits.index_fill(0, torch.tensor(sorted(banned)), float("-inf")).argmax())
        tokens.append(tok)
        logprobs.append(lp)
        ids.append(tok)
    return tokens, logprobs


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_equals_reference_forward(float32_engine, reference_model, prompt):
    engine = float32_engine
    params = sgrun.SamplingParams(max_new_tokens=STEPS, temperature=0, ignore_eos=True, logprobs=5)
    out = engine.generate([prompt], params)[0]
    assert len(out.token_ids) == STEPS
    ref_tokens, ref_lps = reference_greedy(reference_model, out.prompt_token_ids, STEPS, engine.tokenizer.eos_token_ids)
    for step, (ours, theirs, ref_lp, ours_lp) in enumerate(zip(out.token_ids, ref_tokens, ref_lps, out.outputs[0].logprobs)):
        # Per-step log-probabilities agree within a tight tolerance on the top alternatives.
        for tok, _, value in ours_lp.top:
            assert abs(value - float(ref_lp[tok])) < 5e-4, f"step {step}: token {tok} {value} vs {float(ref_lp[tok])}"
        if ours != theirs:
            top2 = torch.topk(ref_lp, 2).values
            gap = float(top2[0] - top2[1])
            assert gap < 1e-3, f"step {step}: diverged ({ours} vs {theirs}) without a near-tie (gap {gap})"
            break
