"""Phi-3 / Phi-3.5 / Phi-4-mini: fused qkv and gate|up projections (split at load), LongRoPE ("su")
scaling with its attention factor, partial rotary (Phi-4-mini rotates 3/4 of each head)."""

from __future__ import annotations

from typing import Any

from sgrun.models.arch.base import Architecture, gguf_config, gguf_get, hf_config, hf_rope
from sgrun.models.config import ModelConfig


def _windows(window: int | None, n: int, max_position: int) -> tuple[int | None, list | None]:
    """Phi-3 windows every layer when its sliding_window is below the context (Phi-3-mini-4k's
    2,047); 0 or a window past the context (Phi-3.5, Phi-4-mini) attends globally."""
    if not window or window >= max_position:
        return None, None
    return int(window), [int(window)] * n


def from_hf(raw: dict[str, Any], name: str) -> ModelConfig:
    rope = hf_rope(raw)
    partial = float(rope.get("partial_rotary_factor") or raw.get("partial_rotary_factor") or 1.0)
    head_dim = raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"]
    rotary = int(head_dim * partial)
    kind = rope.get("rope_type") or rope.get("type") or "default"
    scaling = None
    if kind in ("longrope", "su"):
        scaling = dict(rope, rope_type="longrope")
        scaling.setdefault("original_max_position_embeddings", raw.get("original_max_position_embeddings"))
        if scaling.get("factor") is None:   # transformers: the context ratio sets the attention factor
            scaling["factor"] = raw["max_position_embeddings"] / scaling["original_max_position_embeddings"]
    elif kind != "default":
        scaling = rope
    window, windows = _windows(raw.get("sliding_window"), raw["num_hidden_layers"], raw["max_position_embeddings"])
    return hf_config(raw, name, "phi3", rope_scaling=scaling, rotary_dim=rotary if rotary != head_dim else None,
                     sliding_window=window, layer_windows=windows)


def from_gguf(meta: dict[str, Any], gguf_arch: str, name: str) -> ModelConfig:
    get = gguf_get(meta, gguf_arch)
    cfg = gguf_config(meta, gguf_arch, name, "phi3")
    cfg.sliding_window, cfg.layer_windows = _windows(get("attention.sliding_window"), cfg.num_layers, cfg.max_position)
    # The LongRoPE factors arrive as the rope_factors_long/short tensors (read by gguf_loader).
    cfg.extra["rope_attn_factor"] = get("rope.scaling.attn_factor")
    cfg.extra["rope_original_context"] = get("rope.scaling.original_context_length")
    return cfg


# Fused checkpoint tensors are split into the decoder's q/k/v and gate/up (models/arch/__init__.py).
ARCH = Architecture("phi3", ("phi3",), ("phi3",), from_hf, from_gguf)
