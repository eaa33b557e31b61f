"""OLMoE: q/k RMSNorm over all heads together ([H*D], [KV*D]), 64 experts top-8, weights not
renormalised."""

from __future__ import annotations

from typing import Any

from sgrun.errors import ModelLoadError
from sgrun.models.arch.base import Architecture, gguf_config, gguf_get, hf_config
from sgrun.models.config import ModelConfig


def from_hf(raw: dict[str, Any], name: str) -> ModelConfig:
    if raw.get("clip_qkv") is not None:
        raise ModelLoadError(f"olmoe: clip_qkv={raw['clip_qkv']} is not supported (supported: clip_qkv null)")
    return hf_config(raw, name, "olmoe", qk_norm="full", qkv_bias=bool(raw.get("attention_bias", False)),
                     num_experts=int(raw.get("num_experts") or raw["num_local_experts"]), experts_per_token=int(raw["num_experts_per_tok"]),
                     norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
                     moe_intermediate_size=int(raw["intermediate_size"]))


def from_gguf(meta: dict[str, Any], gguf_arch: str, name: str) -> ModelConfig:
    norm = bool(gguf_get(meta, gguf_arch)("expert_weights_norm", False))
    return gguf_config(meta, gguf_arch, name, "olmoe", qk_norm="full", norm_topk_prob=norm)


ARCH = Architecture("olmoe", ("olmoe",), ("olmoe",), from_hf, from_gguf,
                    hf_names={"mlp.gate.weight": "mlp.router.weight"})
