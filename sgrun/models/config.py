"""Model hyper-parameters for the Llama family, read from GGUF metadata or config.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position: int
    rms_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    tie_embeddings: bool = False
    qkv_bias: bool = False
    name: str = "model"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], name: str) -> "ModelConfig":
        heads = cfg["num_attention_heads"]
        hidden = cfg["hidden_size"]
        # transformers >= 5 writes `rope_parameters` (theta and scaling together); older
        # configs have `rope_theta` and `rope_scaling`.
        rope = cfg.get("rope_parameters") or {}
        theta = cfg.get("rope_theta") or rope.get("rope_theta") or 10000.0
        scaling = cfg.get("rope_scaling")
        if scaling is None and (rope.get("rope_type") or rope.get("type")) not in (None, "default"):
            scaling = rope
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=hidden,
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or hidden // heads,
            max_position=cfg.get("max_position_embeddings", 4096),
            rms_eps=cfg.get("rms_norm_eps", 1e-5),
            rope_theta=float(theta),
            rope_scaling=scaling,
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=bool(cfg.get("attention_bias", False)) or cfg.get("model_type") == "qwen2",
            name=name,
        )
