"""Model hyper-parameters of the decoder family (models/decoder.py), read from GGUF metadata or
config.json by each architecture's reader (models/arch/). Every default is plain Llama's
behaviour, so a field an architecture does not set changes nothing."""

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
    # None, or {"rope_type": linear | llama3 | longrope | freq_factors, ...} (models/layers.py).
    rope_scaling: dict[str, Any] | None = None
    tie_embeddings: bool = False
    qkv_bias: bool = False
    name: str = "model"
    extra: dict[str, Any] = field(default_factory=dict)
    # --- the family (the registry key and what differs from Llama) ---
    arch: str = "llama"               # llama, mistral, qwen2, qwen3, qwen3moe, gemma3, phi3, smollm3, olmoe, mixtral
    hidden_act: str = "silu"          # the MLP is act(gate) * up: "silu" or "gelu_tanh"
    # q/k RMSNorm after the projection (and bias), before RoPE: "head" normalizes each head over
    # head_dim (Qwen3, Gemma3; weight [head_dim]); "full" all q heads together [H*D] and all k
    # heads [KV*D] (OLMoE).
    qk_norm: str | None = None
    sandwich_norm: bool = False       # Gemma3: attention and MLP outputs RMSNormed before the residual add
    embed_scale: float = 1.0          # Gemma: sqrt(hidden_size), multiplied into the embedding rows
    attn_scale: float | None = None   # None: 1/sqrt(head_dim); Gemma3: query_pre_attn_scalar ** -0.5
    rotary_dim: int | None = None     # None: head_dim; RoPE rotates the first rotary_dim dims of each head
    final_logit_softcap: float | None = None   # logits = cap * tanh(logits / cap) (Gemma variants)
    # Sliding windows: a query at position p attends keys at positions j with p - window < j <= p.
    sliding_window: int | None = None
    layer_windows: list[int | None] | None = None   # per layer; None: every layer global
    # RoPE per layer: the sliding layers' own base (Gemma3's local 10,000) and layers without RoPE
    # (SmolLM3's every fourth layer). None: one table for every layer.
    rope_local_theta: float | None = None
    nope_layers: list[bool] | None = None
    # Mixture of experts (models/moe.py).
    num_experts: int = 0
    experts_per_token: int = 0
    norm_topk_prob: bool = False
    moe_intermediate_size: int = 0
    moe_layers: list[bool] | None = None   # None: every layer when num_experts > 0

    def window(self, layer: int) -> int | None:
        return self.layer_windows[layer] if self.layer_windows else None

    def is_moe_layer(self, layer: int) -> bool:
        if self.num_experts <= 0:
            return False
        return True if self.moe_layers is None else bool(self.moe_layers[layer])

    @property
    def llama_shaped(self) -> bool:
        """Nothing here beyond the original Llama decoder (qkv bias and a linear/llama3 rope
        table included): the C++ decode blocks, the compiled forward and tensor parallelism
        serve it as they always did."""
        return (self.hidden_act == "silu" and self.qk_norm is None and not self.sandwich_norm
                and self.embed_scale == 1.0 and self.attn_scale is None
                and self.rotary_dim in (None, self.head_dim) and self.final_logit_softcap is None
                and not any(w is not None for w in (self.layer_windows or []))
                and self.rope_local_theta is None and not any(self.nope_layers or [])
                and self.num_experts == 0
                and (self.rope_scaling or {}).get("rope_type") not in ("longrope",))

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], name: str) -> "ModelConfig":
        """The Llama reading of a config.json (architectures refine it: models/arch/)."""
        heads = cfg["num_attention_heads"]
        hidden = cfg["hidden_size"]
        # transformers >= 5 writes `rope_parameters` (theta and scaling together); older
        # configs have `rope_theta` and `rope_scaling`.
        rope = cfg.get("rope_parameters") or {}
        if "full_attention" in rope:
            rope = rope["full_attention"]
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
