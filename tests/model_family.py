"""Tiny random-weight models of every architecture of the family, built by transformers from a
config alone (nothing downloaded), and their files: a safetensors folder (save_pretrained, the
per-expert names real checkpoints have, or the fused 3-D expert tensors transformers 5 holds in
memory) and a GGUF written with the `gguf` library following llama.cpp's convert_hf_to_gguf.py:
its metadata keys and tensor names, q/k rows permuted for the llama family only, Gemma norms
stored as 1 + w, Phi-3's fused attn_qkv and ffn_up (gate|up) with rope_factors_long/short,
expert tensors stacked 3-D (ffn_{gate,up,down}_exps) with the router ffn_gate_inp, and Llama
3.1's llama3 scaling as the rope_freqs tensor."""

from __future__ import annotations

import json
import math

import numpy as np
import torch
import transformers
import gguf

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, CTX = 64, 4, 2, 16, 128, 256
WINDOW = 8           # Gemma3's sliding window in the tests: shorter than prompt + decode
EXPERTS, TOP_K, EXPERT_FFN = 4, 2, 32

_COMMON = dict(vocab_size=49152, hidden_size=HIDDEN, intermediate_size=FFN, num_attention_heads=HEADS,
               num_key_value_heads=KV_HEADS, max_position_embeddings=CTX, tie_word_embeddings=False,
               bos_token_id=1, eos_token_id=2, pad_token_id=0, attn_implementation="eager")


# Phi-3's original context in these tests: LongRoPE's short factors up to it, the long ones past it.
PHI3_ORIGINAL = CTX // 4


def engine_context(arch: str, original: int = PHI3_ORIGINAL) -> dict:
    """Engine options under which sgrun picks the LongRoPE factors transformers picks on these
    tests' sequences, which are no longer than Phi-3's original context: transformers runs the
    short factors there, and sgrun does too when the engine's context is held to the original
    (layers.longrope_long: past it, the long factors for every position, as llama.cpp)."""
    return {"max_context": original} if arch == "phi3" else {}


def _config(arch: str, short: bool = False, original: int = PHI3_ORIGINAL):
    c = dict(_COMMON, num_hidden_layers=2)
    if arch == "llama":
        return transformers.LlamaConfig(**c, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                           "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 16})
    if arch == "qwen3":
        return transformers.Qwen3Config(**c, head_dim=HEAD_DIM)
    if arch == "qwen3moe":
        return transformers.Qwen3MoeConfig(**c, head_dim=HEAD_DIM, num_experts=EXPERTS, num_experts_per_tok=TOP_K,
                                           moe_intermediate_size=EXPERT_FFN, norm_topk_prob=True)
    if arch == "olmoe":
        return transformers.OlmoeConfig(**dict(c, intermediate_size=EXPERT_FFN), num_experts=EXPERTS,
                                        num_experts_per_tok=TOP_K)
    if arch == "mixtral":
        return transformers.MixtralConfig(**dict(c, intermediate_size=EXPERT_FFN), num_local_experts=EXPERTS,
                                          num_experts_per_tok=TOP_K)
    if arch == "gemma3":
        # Six layers: llama.cpp's pattern (5 sliding, then 1 global) is transformers' default too.
        # `short`: one sliding and one global layer (a folder states its layer_types).
        layers = dict(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"]) if short else \
            dict(num_hidden_layers=6)
        return transformers.Gemma3TextConfig(**dict(c, tie_word_embeddings=True, **layers), head_dim=HEAD_DIM,
                                             sliding_window=WINDOW, query_pre_attn_scalar=HEAD_DIM,
                                             rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                              "full_attention": {"rope_type": "default", "rope_theta": 1e6}})
    if arch == "phi3":
        # Phi-4-mini's shape: partial rotary 3/4, LongRoPE with short/long factors, tied embeddings.
        rot = int(HEAD_DIM * 0.75) // 2
        rope = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                "short_factor": [1.0 + 0.1 * i for i in range(rot)], "long_factor": [2.0 + 0.5 * i for i in range(rot)],
                "original_max_position_embeddings": original}
        return transformers.Phi3Config(**dict(c, tie_word_embeddings=True), rope_parameters=rope,
                                       original_max_position_embeddings=original)
    if arch == "smollm3":
        return transformers.SmolLM3Config(**dict(c, num_hidden_layers=4))
    raise KeyError(arch)


ARCHS = ("llama", "qwen3", "qwen3moe", "gemma3", "phi3", "smollm3", "olmoe", "mixtral")


def tiny_model(arch: str, seed: int = 0, short: bool = False, original: int = PHI3_ORIGINAL):
    """A float32 model with weights large enough that greedy choices are not near-ties
    (`short`: Gemma3 in two layers, for the slow Triton interpreter; `original`: Phi-3's
    original context)."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(_config(arch, short, original)).eval().float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:   # Gemma's multiplier is 1 + w
                p.copy_(torch.randn_like(p) * 0.05 + (0.0 if arch == "gemma3" else 1.0))
            else:
                p.normal_(0, 0.2)
    return model


def save_folder(model, folder, tokenizer, fused_experts: bool = False) -> None:
    """save_pretrained (per-expert names, as real checkpoints), or with `fused_experts` the
    in-memory transformers 5 state dict (3-D expert tensors), plus the tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    if fused_experts:
        from safetensors.torch import save_file
        model.config.save_pretrained(folder)
        sd = {k: v.contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        save_file(sd, str(folder / "model.safetensors"))
    else:
        model.save_pretrained(folder, safe_serialization=True)
    tokenizer.hf.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}))


# --- GGUF, as llama.cpp's converter writes it -------------------------------------------------

GGUF_ARCH = {"llama": "llama", "qwen3": "qwen3", "qwen3moe": "qwen3moe", "gemma3": "gemma3", "phi3": "phi3",
             "smollm3": "smollm3", "olmoe": "olmoe", "mixtral": "llama"}
_PERMUTED = {"llama", "smollm3", "mixtral"}    # convert_hf_to_gguf's LlamaModel family
_NAMES = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
          "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
          "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
          "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
          "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
          "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
          "self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight"}
_GEMMA_NAMES = {"post_attention_layernorm.weight": "post_attention_norm.weight",
                "pre_feedforward_layernorm.weight": "ffn_norm.weight",
                "post_feedforward_layernorm.weight": "post_ffw_norm.weight"}


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(arch: str, model) -> dict[str, np.ndarray]:
    cfg = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out: dict[str, np.ndarray] = {"token_embd.weight": sd["model.embed_tokens.weight"],
                                  "output_norm.weight": sd["model.norm.weight"]}
    if not cfg.tie_word_embeddings:
        out["output.weight"] = sd["lm_head.weight"]
    for name, arr in sd.items():
        if not name.startswith("model.layers."):
            continue
        _, _, i, rest = name.split(".", 3)
        p = f"blk.{i}."
        if rest == "mlp.experts.gate_up_proj":          # [E, 2F, hidden] -> gate and up [E, F, hidden]
            gate, up = np.split(arr, 2, axis=1)
            out[p + "ffn_gate_exps.weight"], out[p + "ffn_up_exps.weight"] = gate, up
            continue
        if rest == "mlp.experts.down_proj":             # [E, hidden, F]
            out[p + "ffn_down_exps.weight"] = arr
            continue
        name_map = dict(_NAMES, **(_GEMMA_NAMES if arch == "gemma3" else {}))
        if arch in _PERMUTED and rest == "self_attn.q_proj.weight":
            arr = _permute(arr, cfg.num_attention_heads)
        elif arch in _PERMUTED and rest == "self_attn.k_proj.weight":
            arr = _permute(arr, cfg.num_key_value_heads)
        out[p + name_map[rest]] = arr
    if arch == "gemma3":   # Gemma3RMSNorm multiplies by 1 + w; llama.cpp stores 1 + w
        out = {k: (v + 1.0 if k.endswith("norm.weight") else v) for k, v in out.items()}
    return out


def write_gguf(arch: str, model, path, qtype: gguf.GGMLQuantizationType, tok_meta: dict,
               gguf_arch: str | None = None) -> None:
    """`gguf_arch`: write another general.architecture (an unsupported one, for the errors)."""
    cfg = model.config
    ga = gguf_arch or GGUF_ARCH[arch]
    w = gguf.GGUFWriter(str(path), ga)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rope = cfg.rope_parameters.get("full_attention", cfg.rope_parameters)
    w.add_rope_freq_base(float(rope["rope_theta"]))
    if getattr(cfg, "head_dim", None):
        w.add_key_length(cfg.head_dim)
        w.add_value_length(cfg.head_dim)
    if arch in _PERMUTED:
        w.add_vocab_size(cfg.vocab_size)
        w.add_rope_dimension_count(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    experts = getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(cfg.num_experts_per_tok)
        if arch == "qwen3moe":
            w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    if arch == "gemma3":
        w.add_sliding_window(cfg.sliding_window)
    tensors = gguf_tensors(arch, model)
    if arch == "phi3":
        head_dim = cfg.hidden_size // cfg.num_attention_heads
        w.add_rope_dimension_count(int(rope["partial_rotary_factor"] * cfg.hidden_size) // cfg.num_attention_heads)
        orig = rope["original_max_position_embeddings"]
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_sliding_window(cfg.sliding_window or 0)
        scale = cfg.max_position_embeddings / orig
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0)
        tensors["rope_factors_long.weight"] = np.array(rope["long_factor"], dtype=np.float32)
        tensors["rope_factors_short.weight"] = np.array(rope["short_factor"], dtype=np.float32)
        assert len(rope["short_factor"]) * 2 == int(rope["partial_rotary_factor"] * head_dim)
    if rope.get("rope_type") == "llama3":   # convert_hf_to_gguf's LlamaModel.generate_extra_tensors
        dim = cfg.hidden_size // cfg.num_attention_heads
        freqs = 1.0 / (rope["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        factors = []
        for f in freqs:
            wavelen = 2 * math.pi / f
            if wavelen < old / high:
                factors.append(1)
            elif wavelen > old / low:
                factors.append(factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                factors.append(1 / ((1 - smooth) / factor + smooth))
        tensors["rope_freqs.weight"] = np.array(factors, dtype=np.float32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(tok_meta["tokenizer.ggml.pre"])
    w.add_token_list(tok_meta["tokenizer.ggml.tokens"])
    w.add_token_types(tok_meta["tokenizer.ggml.token_type"])
    w.add_token_merges(tok_meta["tokenizer.ggml.merges"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        keep_f32 = arr.ndim == 1 or name.endswith("ffn_gate_inp.weight") or qtype == gguf.GGMLQuantizationType.F32
        if keep_f32:
            w.add_tensor(name, arr)
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            q = gguf.quants.quantize(arr, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@torch.inference_mode()
def reference_greedy(model, ids: list[int], steps: int, banned: set[int]):
    """transformers' eager forward over the whole sequence each step (no KV cache); `banned`
    (EOS, as with ignore_eos) is never chosen. Returns (tokens, log-probs per step)."""
    ids = list(ids)
    tokens, lps = [], []
    for _ in range(steps):
        logits = model(torch.tensor([ids]), use_cache=False).logits[0, -1].float()
        lps.append(torch.log_softmax(logits, dim=-1))
        tok = int(logits.index_fill(0, torch.tensor(sorted(banned)), float("-inf")).argmax())
        tokens.append(tok)
        ids.append(tok)
    return tokens, lps


@torch.inference_mode()
def reference_prompt_logprobs(model, ids: list[int]) -> torch.Tensor:
    """log p(ids[i + 1] | ids[: i + 1]) for each position, transformers' float32 forward."""
    lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    return lp[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
