"""What an architecture of the family is (`Architecture`: its config readers and name maps), and
the readers every architecture starts from: Llama's reading of a config.json and of llama.cpp's
GGUF metadata keys ({arch}.block_count, {arch}.attention.head_count, ...).

An architecture file (models/arch/<name>.py) builds on these and registers one row in
models/arch/__init__.py. Weights always end in the decoder's naming (models/decoder.py): the
safetensors map (`hf_names`) renames a checkpoint's layer tensors, the GGUF map is llama.cpp's
shared tensor naming (models/gguf_loader.py) plus the flags here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from sgrun.errors import ModelLoadError
from sgrun.models.config import ModelConfig
from sgrun.models.layers import HF_ACTIVATIONS, check_rope_scaling


@dataclass(frozen=True)
class Architecture:
    name: str                                   # the registry key (ModelConfig.arch)
    hf_model_types: tuple[str, ...]             # config.json "model_type" values it reads
    gguf_archs: tuple[str, ...]                 # GGUF general.architecture values it reads
    from_hf: Callable[[dict[str, Any], str], ModelConfig]
    from_gguf: Callable[[dict[str, Any], str, str], ModelConfig]   # (metadata, gguf arch, name)
    # Checkpoint layer-tensor suffix -> the decoder's (models/decoder.py), where they differ.
    hf_names: dict[str, str] = field(default_factory=dict)
    # Gemma: the checkpoint stores norm weights w for a multiplier 1 + w (folded at load time;
    # llama.cpp's GGUF already stores 1 + w).
    hf_norm_plus_one: bool = False
    # The GGUF archs whose q/k rows llama.cpp interleaves for its RoPE (convert_hf_to_gguf's
    # LlamaModel.permute, the llama family only); undone at load.
    gguf_permuted_qk: tuple[str, ...] = ()
    # Tensor parallelism (models/tensor_parallel.py) shards this architecture.
    tensor_parallel: bool = False


def hf_rope(raw: dict[str, Any], kind: str = "full_attention") -> dict[str, Any]:
    """The rope parameters of a config.json: transformers 5's rope_parameters (per layer kind for
    Gemma3) or the older rope_theta / rope_scaling pair."""
    rope = dict(raw.get("rope_parameters") or {})
    if kind in rope or "full_attention" in rope:
        rope = dict(rope.get(kind) or {})
    if raw.get("rope_scaling"):
        rope.update(raw["rope_scaling"])
    if raw.get("rope_theta") is not None and "rope_theta" not in rope:
        rope["rope_theta"] = raw["rope_theta"]
    return rope


def hf_config(raw: dict[str, Any], name: str, arch: str, **overrides: Any) -> ModelConfig:
    """Llama's reading of config.json with `arch` set, the activation and rope checked."""
    cfg = ModelConfig.from_hf(raw, name)
    cfg.arch = arch
    act = raw.get("hidden_act") or raw.get("hidden_activation") or "silu"
    if act not in HF_ACTIVATIONS:
        raise ModelLoadError(f"{arch}: activation {act!r} is not supported (supported: {', '.join(HF_ACTIVATIONS)})")
    cfg.hidden_act = HF_ACTIVATIONS[act]
    rope = hf_rope(raw)
    kind = rope.get("rope_type") or rope.get("type") or "default"
    cfg.rope_scaling = None if kind == "default" else rope
    cfg = dataclasses.replace(cfg, **overrides)
    check_rope_scaling(arch, cfg.rope_scaling)
    return cfg


def gguf_get(meta: dict[str, Any], gguf_arch: str) -> Callable[..., Any]:
    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{gguf_arch}.{key}", default)
    return get


def gguf_config(meta: dict[str, Any], gguf_arch: str, name: str, arch: str, **overrides: Any) -> ModelConfig:
    """Llama's reading of llama.cpp's metadata keys, `arch` set and `overrides` applied."""
    get = gguf_get(meta, gguf_arch)
    heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    head_dim = int(get("attention.key_length") or hidden // heads)
    vocab = int(get("vocab_size") or len(meta.get("tokenizer.ggml.tokens", [])))
    kind = get("rope.scaling.type")
    scaling = None
    if kind == "linear":
        scaling = {"rope_type": "linear", "factor": float(get("rope.scaling.factor"))}
    elif kind not in (None, "none"):
        scaling = {"rope_type": kind}
    rotary = get("rope.dimension_count")
    cfg = ModelConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=int(get("feed_forward_length") or 0),
        num_layers=int(get("block_count")),
        num_heads=heads,
        num_kv_heads=int(get("attention.head_count_kv") or heads),
        head_dim=head_dim,
        max_position=int(get("context_length", 4096)),
        rms_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rope_scaling=scaling,
        name=name,
        arch=arch,
        rotary_dim=int(rotary) if rotary and int(rotary) != head_dim else None,
    )
    if get("expert_count"):
        cfg.num_experts = int(get("expert_count"))
        cfg.experts_per_token = int(get("expert_used_count"))
        cfg.moe_intermediate_size = int(get("expert_feed_forward_length") or cfg.intermediate_size)
    cfg = dataclasses.replace(cfg, **overrides)
    check_rope_scaling(arch, cfg.rope_scaling)
    return cfg


def hf_all_layer_window(raw: dict[str, Any]) -> dict[str, Any]:
    """Mistral-style configs: `sliding_window` (when set and below the context) windows every
    layer, as transformers applies it; overrides for hf_config."""
    window = raw.get("sliding_window")
    if not window or window >= raw.get("max_position_embeddings", 1 << 62) or raw.get("use_sliding_window") is False:
        return {}
    return {"sliding_window": int(window), "layer_windows": [int(window)] * raw["num_hidden_layers"]}
