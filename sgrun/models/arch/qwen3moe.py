"""Qwen3-MoE (Qwen3-30B-A3B's family): Qwen3's attention, routed experts with top-k and
norm_topk_prob; `mlp_only_layers` / `decoder_sparse_step` keep some layers dense."""

from __future__ import annotations

from typing import Any

from sgrun.models.arch.base import Architecture, gguf_config, gguf_get, hf_config
from sgrun.models.config import ModelConfig


def from_hf(raw: dict[str, Any], name: str) -> ModelConfig:
    n = raw["num_hidden_layers"]
    dense = set(raw.get("mlp_only_layers") or [])
    step = int(raw.get("decoder_sparse_step", 1) or 1)
    moe_layers = [i not in dense and (i + 1) % step == 0 for i in range(n)]
    return hf_config(raw, name, "qwen3moe", qk_norm="head", qkv_bias=bool(raw.get("attention_bias", False)),
                     num_experts=int(raw.get("num_experts") or raw["num_local_experts"]), experts_per_token=int(raw["num_experts_per_tok"]),
                     norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
                     moe_intermediate_size=int(raw["moe_intermediate_size"]),
                     moe_layers=None if all(moe_layers) else moe_layers)


def from_gguf(meta: dict[str, Any], gguf_arch: str, name: str) -> ModelConfig:
    # llama.cpp renormalises Qwen3-MoE's top-k weights unless the file says otherwise.
    norm = bool(gguf_get(meta, gguf_arch)("expert_weights_norm", True))
    return gguf_config(meta, gguf_arch, name, "qwen3moe", qk_norm="head", norm_topk_prob=norm)


HF_NAMES = {"mlp.gate.weight": "mlp.router.weight"}

ARCH = Architecture("qwen3moe", ("qwen3_moe",), ("qwen3moe",), from_hf, from_gguf, hf_names=HF_NAMES)
