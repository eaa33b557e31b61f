"""SmolLM3: Llama with RoPE left out of every fourth layer (NoPE layers)."""

from __future__ import annotations

from typing import Any

from sgrun.models.arch.base import Architecture, gguf_config, hf_config
from sgrun.models.config import ModelConfig

# llama.cpp's rule for the smollm3 GGUF arch (its n_no_rope_layer_step): layer i has no RoPE when
# (i + 1) % 4 == 0; transformers' default no_rope_layers is the same pattern.
NO_ROPE_STEP = 4


def from_hf(raw: dict[str, Any], name: str) -> ModelConfig:
    n = raw["num_hidden_layers"]
    flags = raw.get("no_rope_layers")   # 1: the layer uses RoPE
    if flags is None:
        step = int(raw.get("no_rope_layer_interval", NO_ROPE_STEP))
        flags = [int((i + 1) % step != 0) for i in range(n)]
    windows = None
    if raw.get("use_sliding_window") and raw.get("sliding_window"):
        windows = [raw["sliding_window"] if t == "sliding_attention" else None
                   for t in raw.get("layer_types") or ["sliding_attention"] * n]
    return hf_config(raw, name, "smollm3", nope_layers=[not f for f in flags], layer_windows=windows,
                     sliding_window=raw.get("sliding_window") if windows else None,
                     qkv_bias=bool(raw.get("attention_bias", False)))


def from_gguf(meta: dict[str, Any], gguf_arch: str, name: str) -> ModelConfig:
    cfg = gguf_config(meta, gguf_arch, name, "smollm3")
    cfg.nope_layers = [(i + 1) % NO_ROPE_STEP == 0 for i in range(cfg.num_layers)]
    return cfg


ARCH = Architecture("smollm3", ("smollm3",), ("smollm3",), from_hf, from_gguf, gguf_permuted_qk=("smollm3",))
