"""Llama (1, 2, 3.x incl. Llama 3.1/3.2's llama3 RoPE scaling), Mistral, Qwen2 (qkv bias): the
plain decoder. GGUF arch `llama` with expert tensors is Mixtral (models/arch/mixtral.py)."""

from __future__ import annotations

from typing import Any

from sgrun.models.arch.base import Architecture, gguf_config, hf_all_layer_window, hf_config
from sgrun.models.config import ModelConfig


def from_hf(raw: dict[str, Any], name: str) -> ModelConfig:
    arch = {"qwen2": "qwen2", "mistral": "mistral"}.get(raw.get("model_type"), "llama")
    # Mistral 7B v0.1's 4,096-token window on every layer (later Mistrals set none).
    return hf_config(raw, name, arch, **(hf_all_layer_window(raw) if arch == "mistral" else {}))


def from_gguf(meta: dict[str, Any], gguf_arch: str, name: str) -> ModelConfig:
    # Llama 3.1/3.2's llama3 scaling arrives as the rope_freqs tensor (read by gguf_loader).
    return gguf_config(meta, gguf_arch, name, gguf_arch, qkv_bias=gguf_arch == "qwen2")


ARCH = Architecture("llama", ("llama", "mistral", "qwen2"), ("llama", "mistral", "qwen2"), from_hf, from_gguf,
                    gguf_permuted_qk=("llama", "mistral"), tensor_parallel=True)
