"""Qwen3 (dense): per-head q/k RMSNorm before RoPE, no qkv bias."""

from __future__ import annotations

from typing import Any

from sgrun.models.arch.base import Architecture, gguf_config, hf_config
from sgrun.models.config import ModelConfig


def from_hf(raw: dict[str, Any], name: str) -> ModelConfig:
    return hf_config(raw, name, "qwen3", qk_norm="head", qkv_bias=bool(raw.get("attention_bias", False)))


def from_gguf(meta: dict[str, Any], gguf_arch: str, name: str) -> ModelConfig:
    return gguf_config(meta, gguf_arch, name, "qwen3", qk_norm="head")


ARCH = Architecture("qwen3", ("qwen3",), ("qwen3",), from_hf, from_gguf)
