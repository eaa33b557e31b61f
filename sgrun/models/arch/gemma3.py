"""Gemma 3 (text): interleaved sliding-window and global layers, each kind with its own RoPE base
(local 10,000; global rope_theta, linearly scaled on the larger models), per-head q/k RMSNorm,
sandwich norms around attention and the MLP, embeddings scaled by sqrt(hidden_size), GELU-tanh,
attention scaled by query_pre_attn_scalar ** -0.5. Norm weights w mean 1 + w in the checkpoint."""

from __future__ import annotations

import math
from typing import Any

from sgrun.errors import ModelLoadError
from sgrun.models.arch.base import Architecture, gguf_config, gguf_get, hf_config, hf_rope
from sgrun.models.config import ModelConfig

# llama.cpp's default interleave when the file has no pattern: 5 sliding layers, then 1 global.
SWA_PATTERN = 6
LOCAL_ROPE_THETA = 10000.0


def from_hf(raw: dict[str, Any], name: str) -> ModelConfig:
    if raw.get("attn_logit_softcapping") is not None:
        raise ModelLoadError("gemma3: attn_logit_softcapping is not supported (supported: null, as in Gemma 3)")
    n = raw["num_hidden_layers"]
    window = raw.get("sliding_window")
    types = raw.get("layer_types")
    if types is None:
        pattern = int(raw.get("sliding_window_pattern") or raw.get("_sliding_window_pattern") or SWA_PATTERN)
        types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]
    windows = [window if t == "sliding_attention" and window else None for t in types]
    local = hf_rope(raw, "sliding_attention").get("rope_theta") or raw.get("rope_local_base_freq") or LOCAL_ROPE_THETA
    return hf_config(raw, name, "gemma3", qk_norm="head", sandwich_norm=True, hidden_act="gelu_tanh",
                     embed_scale=math.sqrt(raw["hidden_size"]),
                     attn_scale=float(raw.get("query_pre_attn_scalar") or raw.get("head_dim") or 256) ** -0.5,
                     final_logit_softcap=raw.get("final_logit_softcapping"),
                     sliding_window=window, layer_windows=windows if any(windows) else None,
                     rope_local_theta=float(local), tie_embeddings=bool(raw.get("tie_word_embeddings", True)),
                     qkv_bias=bool(raw.get("attention_bias", False)))


def from_gguf(meta: dict[str, Any], gguf_arch: str, name: str) -> ModelConfig:
    get = gguf_get(meta, gguf_arch)
    cfg = gguf_config(meta, gguf_arch, name, "gemma3", qk_norm="head", sandwich_norm=True, hidden_act="gelu_tanh",
                      final_logit_softcap=get("final_logit_softcapping") or None)
    cfg.embed_scale = math.sqrt(cfg.hidden_size)
    # llama.cpp: 1/sqrt(head_dim), except the 27B layout (62 layers) whose query_pre_attn_scalar
    # is hidden_size / heads.
    cfg.attn_scale = ((cfg.hidden_size / cfg.num_heads) if cfg.num_layers == 62 else cfg.head_dim) ** -0.5
    window = get("attention.sliding_window")
    if window:
        pattern = get("attention.sliding_window_pattern", SWA_PATTERN)
        if isinstance(pattern, list):
            sliding = [bool(p) for p in pattern]
        else:
            pattern = int(pattern)
            sliding = [pattern == 0 or i % pattern < pattern - 1 for i in range(cfg.num_layers)]
        cfg.sliding_window = int(window)
        cfg.layer_windows = [int(window) if s else None for s in sliding]
        cfg.rope_local_theta = float(get("rope.freq_base_swa", LOCAL_ROPE_THETA))
    return cfg


# The checkpoint's norms -> the decoder's: Gemma's post_attention_layernorm is the sandwich norm
# on the attention output, pre_feedforward_layernorm the MLP's input norm.
HF_NAMES = {"post_attention_layernorm.weight": "attn_out_norm.weight",
            "pre_feedforward_layernorm.weight": "post_attention_layernorm.weight",
            "post_feedforward_layernorm.weight": "mlp_out_norm.weight"}

ARCH = Architecture("gemma3", ("gemma3_text", "gemma3"), ("gemma3",), from_hf, from_gguf, hf_names=HF_NAMES,
                    hf_norm_plus_one=True)
