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

from cpu_levels import SIMD_LEVELS, at_level, each_level  # noqa: F401 (at_level: a fixture)
from model_family import ARCHS, engine_context, reference_greedy, reference_prompt_logprobs, save_folder, tiny_model, write_gguf

PROMPT = [1, 504, 3458, 314, 260, 1345, 28, 198, 42, 2821, 9025, 216, 33, 34]
STEPS = 32


@pytest.fixture(scope="module")
def tok_meta(model_path):
    from sgrun.models.gguf_file import GGUFFile
    return GGUFFile(model_path).metadata


def make_files(arch: str, tmp_path, tokenizer, tok_meta, fmt: str, short: bool = False):
    model = tiny_model(arch, short=short)
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


def check_against_transformers(engine: sgrun.Engine, model, steps: int = STEPS) -> list[int]:
    """Prefill log-probs and 32 greedy steps against transformers; returns sgrun's tokens."""
    ours = torch.tensor(engine.score(PROMPT[:1], [PROMPT[1:]])[0])
    theirs = reference_prompt_logprobs(model, PROMPT)
    assert torch.allclose(ours, theirs, atol=1e-3), f"prefill log-probs differ by {(ours - theirs).abs().max()}"
    params = sgrun.SamplingParams(max_new_tokens=steps, temperature=0, ignore_eos=True, logprobs=3)
    out = engine.generate([PROMPT], params)[0]
    assert len(out.token_ids) == steps
    ref_tokens, ref_lps = reference_greedy(model, PROMPT, steps, engine.tokenizer.eos_token_ids)
    for step, (a, b, ref_lp, lp) in enumerate(zip(out.token_ids, ref_tokens, ref_lps, out.outputs[0].logprobs)):
        for tok, _, value in lp.top:
            assert abs(value - float(ref_lp[tok])) < 1e-3, f"step {step}: token {tok} {value} vs {float(ref_lp[tok])}"
        if a != b:
            top2 = torch.topk(ref_lp, 2).values
            assert float(top2[0] - top2[1]) < 1e-3, f"step {step}: greedy token {a} vs transformers' {b}"
            break
    return out.token_ids


@pytest.mark.parametrize("fmt", ["safetensors", "gguf"])
@pytest.mark.parametrize("arch", ARCHS)
def test_matches_transformers(arch, fmt, tmp_path, tokenizer, tok_meta):
    model, path = make_files(arch, tmp_path, tokenizer, tok_meta, fmt)
    engine = engine_for(path, **engine_context(arch))
    try:
        assert engine.model.cfg.arch == arch
        check_against_transformers(engine, model)
    finally:
        engine.close()


@pytest.mark.parametrize("arch", ["qwen3moe", pytest.param("olmoe", marks=pytest.mark.slow),
                                  pytest.param("mixtral", marks=pytest.mark.slow)])
def test_moe_fused_expert_tensors_load(arch, tmp_path, tokenizer, tok_meta):
    """transformers 5 holds experts as 3-D gate_up_proj / down_proj tensors; a folder saved from
    that state dict loads as well as save_pretrained's per-expert names."""
    model, path = make_files(arch, tmp_path, tokenizer, tok_meta, "fused")
    from safetensors import safe_open
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        assert any(k.endswith("mlp.experts.gate_up_proj") for k in f.keys())
    engine = engine_for(path)
    try:
        check_against_transformers(engine, model)
    finally:
        engine.close()


@pytest.mark.parametrize("arch", ["gemma3", "qwen3moe"])
def test_triton_backend_under_the_interpreter(arch, tmp_path, tokenizer, tok_meta):
    """The Triton kernels (conftest sets TRITON_INTERPRET=1) with Gemma3's sliding windows and an
    MoE model: chunked prefill (8-token chunks), decode across the window (16 steps: the
    interpreter is slow), then a prompt that shares a cached page with the first request; equal to
    transformers as above. Gemma3 in two layers (one sliding, one global)."""
    model, path = make_files(arch, tmp_path, tokenizer, tok_meta, "safetensors", short=True)
    engine = engine_for(path, attention_backend="triton", device="cpu", max_batch_tokens=8)
    try:
        assert engine.startup_report()["attention_backend"] == "TritonPagedAttention"
        first = check_against_transformers(engine, model, steps=16)
        prompt = PROMPT + first[:4] + [77]
        params = sgrun.SamplingParams(max_new_tokens=4, temperature=0, ignore_eos=True)
        again = engine.submit(prompt, params)
        tokens, cached = again.result().token_ids, again.cached_tokens
        assert cached == 16
        ref, _ = reference_greedy(model, prompt, 4, engine.tokenizer.eos_token_ids)
        assert tokens == ref
    finally:
        engine.close()


# Mean KL(transformers float32 || sgrun) per greedy step over 32 steps, for the default path on a
# Q4_0 / Q8_0 file (quantization "auto": the file's int4 / int8 kept, dtype auto). Measured on
# these tiny random models (weights N(0, 0.2): sharper logits than a trained model's) at the
# native level of an AMX Xeon, 7 December 2026: Q4_0 0.0046 (gemma3) to 0.022 (smollm3), Q8_0
# 0.00001 to 0.00064 (qwen3moe). The bounds leave about 2x-3x room for other levels.
QUANT_KL_BOUND = {"Q4_0": 0.05, "Q8_0": 0.002}


def kl_to_transformers(engine: sgrun.Engine, model) -> float:
    """Mean KL per greedy step against transformers' float32 forward on the unquantized model."""
    params = sgrun.SamplingParams(max_new_tokens=STEPS, temperature=0, ignore_eos=True, logprobs=20)
    out = engine.generate([PROMPT], params)[0]
    ids = PROMPT + out.token_ids
    with torch.inference_mode():
        ref = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    kls = []
    for step, lp in enumerate(out.outputs[0].logprobs):
        p_ref = ref[len(PROMPT) - 1 + step]
        toks = torch.tensor([t for t, _, _ in lp.top])
        ours = torch.tensor([v for _, _, v in lp.top])
        # KL over the top-20 of sgrun's distribution plus the rest as one bucket (a lower bound
        # on the full KL that is tight when the top-20 hold nearly all the mass).
        p = ref_top = p_ref[toks].exp()
        q = ours.exp()
        rest_p, rest_q = (1 - ref_top.sum()).clamp(min=1e-12), (1 - q.sum()).clamp(min=1e-12)
        kls.append(float((p * (p.log() - q.log())).sum() + rest_p * (rest_p.log() - rest_q.log())))
    return sum(kls) / len(kls)


@pytest.mark.parametrize("qtype", ["Q4_0", pytest.param("Q8_0", marks=pytest.mark.slow)])
@pytest.mark.parametrize("arch", ARCHS)
def test_quantized_default_path_stays_close(arch, qtype, tmp_path, tok_meta):
    check_quantized(arch, qtype, tmp_path, tok_meta)


@each_level(["avx2"] if "avx2" in SIMD_LEVELS else [])
@pytest.mark.parametrize("arch", ["gemma3", "qwen3moe", "phi3"])
def test_quantized_default_path_at_forced_avx2(arch, level, at_level, tmp_path, tok_meta):
    """The int4 kernels of the AVX2 level (forced on this CPU, tests/cpu_levels.py)."""
    check_quantized(arch, "Q4_0", tmp_path, tok_meta)


def check_quantized(arch: str, qtype: str, tmp_path, tok_meta) -> None:
    model = tiny_model(arch)
    path = tmp_path / f"{arch}-{qtype}.gguf"
    write_gguf(arch, model, path, getattr(gguf.GGMLQuantizationType, qtype), tok_meta)
    with sgrun.Engine(str(path), max_pages=64, page_size=16, **engine_context(arch)) as engine:
        assert engine.quantization == {"Q4_0": "int4", "Q8_0": "int8"}[qtype]
        assert engine.startup_report()["weights"].startswith(engine.quantization)   # experts included
        kl = kl_to_transformers(engine, model)
    assert kl < QUANT_KL_BOUND[qtype], f"{arch} {qtype}: mean KL {kl:.4f}"


def _edit_folder(folder, config=None, tensors=None) -> None:
    import json
    from safetensors.torch import load_file, save_file
    if config:
        raw = json.loads((folder / "config.json").read_text())
        config(raw)
        (folder / "config.json").write_text(json.dumps(raw))
    if tensors:
        sd = load_file(str(folder / "model.safetensors"))
        tensors(sd)
        save_file(sd, str(folder / "model.safetensors"))


def test_unsupported_models_get_a_model_load_error_naming_what_is_supported(tmp_path, tokenizer, tok_meta):
    model = tiny_model("qwen3")
    path = tmp_path / "mamba.gguf"
    write_gguf("qwen3", model, path, gguf.GGMLQuantizationType.F32, tok_meta, gguf_arch="mamba")
    with pytest.raises(sgrun.ModelLoadError, match=r"GGUF architecture 'mamba' is not supported \(supported: .*gemma3.*qwen3moe"):
        sgrun.Engine(str(path))

    def folder(name, config=None, tensors=None):
        f = tmp_path / name
        save_folder(model, f, tokenizer)
        _edit_folder(f, config, tensors)
        return f

    unknown = folder("jamba", config=lambda raw: raw.update(model_type="jamba"))
    with pytest.raises(sgrun.ModelLoadError, match=r"model_type 'jamba' is not supported \(supported: .*gemma3_text.*smollm3"):
        sgrun.Engine(str(unknown))
    yarn = folder("yarn", config=lambda raw: raw.update(rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                                                         "rope_theta": 1e6}))
    with pytest.raises(sgrun.ModelLoadError, match=r"qwen3: rope scaling 'yarn' is not supported \(supported: .*llama3.*longrope"):
        sgrun.Engine(str(yarn))
    missing = folder("missing", tensors=lambda sd: sd.pop("model.layers.1.self_attn.k_norm.weight"))
    with pytest.raises(sgrun.ModelLoadError, match=r"qwen3 model .*tensor 'model.layers.1.self_attn.k_norm.weight' is missing"):
        sgrun.Engine(str(missing))
    bad_shape = folder("shape", tensors=lambda sd: sd.update({"model.layers.0.self_attn.q_norm.weight": torch.ones(8)}))
    with pytest.raises(sgrun.ModelLoadError,
                       match=r"tensor 'model.layers.0.self_attn.q_norm.weight' has shape \[8\], expected \[16\]"):
        sgrun.Engine(str(bad_shape))


def test_cli_prints_one_line_for_an_unsupported_model(tmp_path, tok_meta, capsys):
    from sgrun.cli import main
    path = tmp_path / "bad.gguf"
    write_gguf("qwen3", tiny_model("qwen3"), path, gguf.GGMLQuantizationType.F32, tok_meta, gguf_arch="mamba")
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--model", str(path), "hello"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sgrun: error: GGUF architecture 'mamba' is not supported"), err
    assert "Traceback" not in err[0]


@pytest.mark.parametrize("arch", ["gemma3", "qwen3moe"])
def test_engine_features_on_new_architectures(arch, tmp_path, tokenizer, tok_meta):
    """Chunked prefill (8-token chunks), n-gram speculation (drafts verified as multi-token
    segments after a cached context, across Gemma3's window), the radix cache and a regex
    constraint, on a windowed model and an MoE model: greedy tokens still equal transformers'."""
    model, path = make_files(arch, tmp_path, tokenizer, tok_meta, "gguf")
    engine = engine_for(path, max_batch_tokens=8, speculative_ngram=True)
    try:
        prompt = PROMPT * 3                     # repeats: the n-gram drafter proposes
        params = sgrun.SamplingParams(max_new_tokens=24, temperature=0, ignore_eos=True)
        handle = engine.submit(prompt, params)
        out = handle.result().token_ids
        ref, _ = reference_greedy(model, prompt, 24, engine.tokenizer.eos_token_ids)
        assert out == ref
        again = engine.submit(prompt[:40] + [5], sgrun.SamplingParams(max_new_tokens=6, temperature=0, ignore_eos=True))
        assert again.result().token_ids == reference_greedy(model, prompt[:40] + [5], 6, engine.tokenizer.eos_token_ids)[0]
        assert again.cached_tokens == 32
        text = engine.generate([PROMPT], sgrun.SamplingParams(max_new_tokens=8, temperature=0,
                                                              regex="[a-c]{2}x[0-9]+"))[0].text
        assert text[:3] in {a + b + "x" for a in "abc" for b in "abc"} and text[3:].isdigit()
    finally:
        engine.close()


def test_mistral_window_on_every_layer(tmp_path, tokenizer):
    """A Mistral config's sliding_window (Mistral 7B v0.1) windows every layer, as transformers
    applies it: here 6 tokens, well inside the prompt and the decode."""
    import transformers
    from model_family import _COMMON
    torch.manual_seed(0)
    model = transformers.MistralForCausalLM(transformers.MistralConfig(**dict(_COMMON, num_hidden_layers=2),
                                                                       sliding_window=6, head_dim=16)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0, 0.2) if "norm" not in name else p.fill_(1.0)
    save_folder(model, tmp_path / "mistral", tokenizer)
    engine = engine_for(tmp_path / "mistral")
    try:
        assert engine.model.cfg.layer_windows == [6, 6]
        check_against_transformers(engine, model)
    finally:
        engine.close()
