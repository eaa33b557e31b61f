"""Phi-3's LongRoPE: the short factors when the engine's context is within the original one, the
long factors (with the attention factor) for every position when it exceeds it, as llama.cpp
decides. transformers picks by the sequence's length in one forward, so each side is checked
against it where the two rules agree: a sequence longer than the original context (8 tokens
past it), and an engine held to the original context. Both from a safetensors folder and from a
GGUF, where the factors arrive as rope_factors_long/short tensors."""

from __future__ import annotations

import pytest
import torch

import gguf
import sgrun

from model_family import reference_greedy, reference_prompt_logprobs, save_folder, tiny_model, write_gguf

ORIGINAL = 32          # Phi-3's original context here; the model's context is 256


@pytest.fixture(scope="module")
def tok_meta(model_path):
    from sgrun.models.gguf_file import GGUFFile
    return GGUFFile(model_path).metadata


def prompt(n: int) -> list[int]:
    return [1] + [(37 * i + 11) % 4000 + 100 for i in range(n - 1)]


def files(fmt: str, tmp_path, tokenizer, tok_meta):
    model = tiny_model("phi3", original=ORIGINAL)
    if fmt == "gguf":
        path = tmp_path / "phi3.gguf"
        write_gguf("phi3", model, path, gguf.GGMLQuantizationType.F32, tok_meta)
    else:
        path = tmp_path / "phi3"
        save_folder(model, path, tokenizer)
    return model, path


def engine(path, **kw) -> sgrun.Engine:
    return sgrun.Engine(str(path), dtype="float32", max_pages=32, page_size=16, quantization="none",
                        kv_cache_dtype="float32", **kw)


def check(engine: sgrun.Engine, model, ids: list[int], steps: int) -> torch.Tensor:
    ours = torch.tensor(engine.score(ids[:1], [ids[1:]])[0])
    theirs = reference_prompt_logprobs(model, ids)
    assert torch.allclose(ours, theirs, atol=1e-3), f"prompt log-probs differ by {(ours - theirs).abs().max()}"
    out = engine.generate([ids], sgrun.SamplingParams(max_new_tokens=steps, temperature=0, ignore_eos=True))[0]
    assert out.token_ids == reference_greedy(model, ids, steps, engine.tokenizer.eos_token_ids)[0]
    return ours


@pytest.mark.parametrize("fmt", ["safetensors", "gguf"])
def test_long_factors_past_the_original_context(fmt, tmp_path, tokenizer, tok_meta):
    model, path = files(fmt, tmp_path, tokenizer, tok_meta)
    ids = prompt(ORIGINAL + 8)             # transformers: one forward longer than the original -> long
    with engine(path) as long_engine:      # context 256 > 32: the long factors
        assert long_engine.max_context > ORIGINAL and long_engine.model.long_rope
        long_lps = check(long_engine, model, ids, steps=4)
    with engine(path, max_context=ORIGINAL) as short_engine:   # held to 32: the short factors
        assert not short_engine.model.long_rope
        short_ids = ids[:ORIGINAL - 6]     # transformers: within the original -> short
        check(short_engine, model, short_ids, steps=4)
        # The two sides differ (the factors are not the same), so each check above means something.
        assert not torch.allclose(torch.tensor(short_engine.score(ids[:1], [short_ids[1:]])[0]),
                                  long_lps[:len(short_ids) - 1], atol=1e-3)


def test_model_without_an_engine_runs_its_trained_context(tmp_path, tokenizer, tok_meta):
    """A model built alone runs at its trained context (llama.cpp's n_ctx 0); use_context switches."""
    from sgrun.models.llama import LlamaModel
    from sgrun.models.loader import load_model_files
    _, path = files("gguf", tmp_path, tokenizer, tok_meta)
    loaded = load_model_files(path)
    scaling = loaded.config.rope_scaling
    assert scaling["original_max_position_embeddings"] == ORIGINAL and scaling["long_factor"]
    model = LlamaModel(loaded.config, loaded.weights, torch.float32)
    assert model.long_rope
    long_cos = model.rope_tables[0][0].clone()
    model.use_context(ORIGINAL)
    assert not model.long_rope and not torch.equal(model.rope_tables[0][0], long_cos)
    assert torch.equal(model.cos, model.rope_tables[0][0])
