"""Mixtral: Mistral's attention with 8 experts top-2 (softmax over the top-2 logits, i.e. the
renormalised top-2 probabilities). llama.cpp writes it as GGUF arch `llama` with expert tensors;
the GGUF loader picks this architecture when {arch}.expert_count is set."""

from __future__ import annotations

from typing import Any

from sgrun.models.arch.base import Architecture, gguf_config, hf_all_layer_window, hf_config
from sgrun.models.config import ModelConfig


def from_hf(raw: dict[str, Any], name: str) -> ModelConfig:
    return hf_config(raw, name, "mixtral", num_experts=int(raw.get("num_local_experts") or raw["num_experts"]),
                     experts_per_token=int(raw["num_experts_per_tok"]), norm_topk_prob=True,
                     moe_intermediate_size=int(raw["intermediate_size"]), **hf_all_layer_window(raw))


def from_gguf(meta: dict[str, Any], gguf_arch: str, name: str) -> ModelConfig:
    return gguf_config(meta, gguf_arch, name, "mixtral", norm_topk_prob=True)


# Checkpoints name Mixtral's MoE block_sparse_moe with experts w1 (gate), w3 (up), w2 (down);
# transformers 5 models name it mlp with gate/up/down (both are read).
HF_NAMES = {"block_sparse_moe.gate.weight": "mlp.router.weight", "mlp.gate.weight": "mlp.router.weight"}

ARCH = Architecture("mixtral", ("mixtral",), (), from_hf, from_gguf, hf_names=HF_NAMES, gguf_permuted_qk=("llama",))
