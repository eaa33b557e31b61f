"""Loading: tiny random models written as GGUF files (each weight type) and as Hugging Face
folders give the same logits in sgrun as in transformers reading the same files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import sgrun
from sgrun.models.loader import load_model

import transformers
import gguf

HIDDEN, HEADS, KV_HEADS, LAYERS, FFN = 64, 4, 2, 2, 128


def tiny_llama(seed: int = 0, **overrides):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=49152, hidden_size=HIDDEN, intermediate_size=FFN,
                                   num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                   num_key_value_heads=KV_HEADS, max_position_embeddings=256,
                                   rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                   bos_token_id=1, eos_token_id=2, **overrides)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0).add_(torch.randn_like(p) * 0.05)
    return model


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's Q/K row order (what convert_hf_to_gguf writes)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, path, qtype, smol_meta: dict):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(smol_meta["tokenizer.ggml.pre"])
    w.add_token_list(smol_meta["tokenizer.ggml.tokens"])
    w.add_token_types(smol_meta["tokenizer.ggml.token_type"])
    w.add_token_merges(smol_meta["tokenizer.ggml.merges"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
                 "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
                 "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
                 "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
                 "mlp.down_proj.weight": "ffn_down.weight"}
    for name, arr in sd.items():
        if name.startswith("model.layers."):
            _, _, i, rest = name.split(".", 3)
            out = f"blk.{i}.{per_layer[rest]}"
            if rest == "self_attn.q_proj.weight":
                arr = _permute(arr, HEADS)
            elif rest == "self_attn.k_proj.weight":
                arr = _permute(arr, KV_HEADS)
        else:
            out = names[name]
        if arr.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(out, arr.astype(np.float32))
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(out, arr.astype(np.float16))
        else:
            q = gguf.quants.quantize(arr, qtype)
            w.add_tensor(out, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def smol_meta(model_path):
    from sgrun.models.gguf_file import GGUFFile
    return GGUFFile(model_path).metadata


TOKENS = [1, 504, 3458, 314, 260, 1345, 28, 198, 42, 2821, 9025, 216, 33, 34]


def our_logits(path) -> torch.Tensor:
    """The loaded file's log-probs through a float32 engine with float32 KV pages: the claim is the
    loading, compared with transformers' float32 forward within 1e-3 (float16 pages move them by ~3e-3)."""
    engine = sgrun.Engine(str(path), dtype="float32", max_pages=16, page_size=16, quantization="none",
                          kv_cache_dtype="float32")
    try:
        scores = engine.score(TOKENS[:1], [TOKENS[1:]])[0]
    finally:
        engine.close()
    return torch.tensor(scores)


def their_logprobs(model) -> torch.Tensor:
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([TOKENS])).logits[0].float(), -1)
    return lp[:-1].gather(1, torch.tensor(TOKENS[1:])[:, None])[:, 0]


@pytest.mark.parametrize("qtype", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"])
def test_gguf_weight_types_match_transformers(tmp_path, smol_meta, qtype):
    qt = getattr(gguf.GGMLQuantizationType, qtype)
    path = tmp_path / f"tiny-{qtype}.gguf"
    write_gguf(tiny_llama(), path, qt, smol_meta)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32)
    ours = our_logits(path)
    theirs = their_logprobs(ref.eval())
    assert torch.allclose(ours, theirs, atol=1e-3), (ours - theirs).abs().max()


def save_folder(model, folder, tokenizer, template: str | None):
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.hf.save(str(folder / "tokenizer.json"))
    cfg = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    if template:
        cfg["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("variant", ["llama-untied", "llama-tied-llama3-rope", "qwen2-bias"])
def test_safetensors_folder_matches_transformers(tmp_path, tokenizer, variant):
    if variant == "qwen2-bias":
        torch.manual_seed(1)
        cfg = transformers.Qwen2Config(vocab_size=49152, hidden_size=HIDDEN, intermediate_size=FFN,
                                       num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                       num_key_value_heads=KV_HEADS, max_position_embeddings=256,
                                       tie_word_embeddings=False, eos_token_id=2)
        model = transformers.Qwen2ForCausalLM(cfg).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.normal_(0, 0.2) if "norm" not in name else p.fill_(1.0)
    elif variant == "llama-tied-llama3-rope":
        model = tiny_llama(2, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8})
        model.config.tie_word_embeddings = True
        model.tie_weights()
    else:
        model = tiny_llama(3)
    folder = tmp_path / variant
    save_folder(model, folder, tokenizer, tokenizer.chat_template.source)
    ours = our_logits(folder)
    theirs = their_logprobs(model)
    assert torch.allclose(ours, theirs, atol=1e-3), (ours - theirs).abs().max()
    # The folder's tokenizer and chat template are used.
    _, tok, _ = load_model(str(folder), torch.float32)
    assert tok.encode("Hello world") == tokenizer.encode("Hello world")
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]).endswith("<|im_start|>assistant\n")
    assert 2 in tok.eos_token_ids


def test_missing_or_bad_model_paths_raise_clear_errors(tmp_path):
    with pytest.raises(sgrun.ModelLoadError, match="not found"):
        sgrun.Engine(str(tmp_path / "nope.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(sgrun.ModelLoadError, match="GGUF"):
        sgrun.Engine(str(bad))
    (tmp_path / "folder").mkdir()
    with pytest.raises(sgrun.ModelLoadError, match="config.json"):
        sgrun.Engine(str(tmp_path / "folder"))
