"""Every architecture of the family (docs/models.md) against transformers: a tiny random-weight
model built from a config, saved as a safetensors folder and as a GGUF file the way llama.cpp's
converter writes it (tests/model_family.py), loaded by sgrun and run through the engine's paged
path in dense float32. The prompt's log-probabilities agree with transformers' eager forward
within 1e-3 and 32 greedy decode steps give the same tokens (a divergence is accepted only at a
near-tie of transformers' own top two, under 1e-3 apart).

The default path (a Q4_0 / Q8_0 GGUF, quantization "auto") stays within a stated mean KL of
transformers on the float32 model (QUANT_KL_BOUND)."""

from __future__ import annotations

import pytest
import torch

import gguf
import sgrun

from model_family import ARCHS, reference_greedy, reference_prompt_logprobs, save_folder, tiny_model, write_gguf

PROMPT = [1, 504, 3458, 314, 260, 1345, 28, 198, 42, 2821, 9025, 216, 33, 34]
STEPS = 32


@pytest.fixture(scope="module")
def tok_meta(model_path):
    from sgrun.models.gguf_file import GGUFFile
    return GGUFFile(model_path).metadata


def make_files(arch: str, tmp_path, tokenizer, tok_meta, fmt: str):
    model = tiny_model(arch)
    if fmt == "gguf":
        path = tmp_path / f"{arch}.gguf"
        write_gguf(arch, model, path, gguf.GGMLQuantizationType.F32, tok_meta)
    else:
        path = tmp_path / arch
        save_folder(model, path, tokenizer, fused_experts=fmt == "fused")
    return model, path


def engine_for(path, **kw) -> sgrun.Engine:
    opts = dict(dtype="float32", max_pages=64, page_size=16, quantization="none", kv_cache_dtype="float32")
    opts.update(kw)
    return sgrun.Engine(str(path), **opts)


def check_against_transformers(engine: sgrun.Engine, model) -> None:
    ours = torch.tensor(engine.score(PROMPT[:1], [PROMPT[1:]])[0])
    theirs = reference_prompt_logprobs(model, PROMPT)
    assert torch.allclose(ours, theirs, atol=1e-3), f"prefill log-probs differ by {(ours - theirs).abs().max()}"
    params = sgrun.SamplingParams(max_new_tokens=STEPS, temperature=0, ignore_eos=True, logprobs=3)
    out = engine.generate([PROMPT], params)[0]
    assert len(out.token_ids) == STEPS
    ref_tokens, ref_lps = reference_greedy(model, PROMPT, STEPS, engine.tokenizer.eos_token_ids)
    for step, (a, b, ref_lp, lp) in enumerate(zip(out.token_ids, ref_tokens, ref_lps, out.outputs[0].logprobs)):
        for tok, _, value in lp.top:
            assert abs(value - float(ref_lp[tok])) < 1e-3, f"step {step}: token {tok} {value} vs {float(ref_lp[tok])}"
        if a != b:
            top2 = torch.topk(ref_lp, 2).values
            assert float(top2[0] - top2[1]) < 1e-3, f"step {step}: greedy token {a} vs transformers' {b}"
            break


@pytest.mark.parametrize("fmt", ["safetensors", "gguf"])
@pytest.mark.parametrize("arch", ARCHS)
def test_matches_transformers(arch, fmt, tmp_path, tokenizer, tok_meta):
    model, path = make_files(arch, tmp_path, tokenizer, tok_meta, fmt)
    engine = engine_for(path)
    try:
        assert engine.model.cfg.arch == arch
        check_against_transformers(engine, model)
    finally:
        engine.close()
