"""The registry of architectures: one row per file in this package. A new architecture is a small
file (its config readers and name maps: base.Architecture) plus its row here.

`for_hf` / `for_gguf` pick the row for a config.json / GGUF file, or raise ModelLoadError naming
what was found and what is supported. `hf_weights` turns a checkpoint's tensors into the
decoder's naming (models/decoder.py): the row's renames, Gemma's 1 + w norms, Phi-3's fused
qkv and gate|up split, Mixtral's w1/w3/w2 experts and transformers 5's fused 3-D expert tensors
split per expert.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

import torch

from sgrun.errors import ModelLoadError
from sgrun.models.arch import gemma3, llama, mixtral, olmoe, phi3, qwen3, qwen3moe, smollm3
from sgrun.models.arch.base import Architecture
from sgrun.models.config import ModelConfig

ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    llama.ARCH, qwen3.ARCH, qwen3moe.ARCH, gemma3.ARCH, phi3.ARCH, smollm3.ARCH, olmoe.ARCH, mixtral.ARCH)}
# The registry keys llama.py's row also answers to.
ALIASES = {"mistral": "llama", "qwen2": "llama"}


def architecture(name: str) -> Architecture:
    return ARCHITECTURES[ALIASES.get(name, name)]


def hf_model_types() -> list[str]:
    return sorted(t for a in ARCHITECTURES.values() for t in a.hf_model_types)


def gguf_archs() -> list[str]:
    return sorted({g for a in ARCHITECTURES.values() for g in a.gguf_archs})


def for_hf(raw: dict[str, Any]) -> Architecture:
    model_type = raw.get("model_type")
    for a in ARCHITECTURES.values():
        if model_type in a.hf_model_types:
            return a
    raise ModelLoadError(f"model_type {model_type!r} is not supported (supported: {', '.join(hf_model_types())})")


def for_gguf(meta: dict[str, Any]) -> Architecture:
    name = meta.get("general.architecture")
    if name == "llama" and meta.get("llama.expert_count"):
        return mixtral.ARCH    # llama.cpp writes Mixtral as arch llama with expert tensors
    for a in ARCHITECTURES.values():
        if name in a.gguf_archs:
            return a
    raise ModelLoadError(f"GGUF architecture {name!r} is not supported (supported: {', '.join(gguf_archs())})")


def config_from_hf(raw: dict[str, Any], name: str) -> ModelConfig:
    arch = for_hf(raw)
    try:
        return arch.from_hf(raw, name)
    except (KeyError, TypeError, ValueError) as exc:   # a config.json without a field the reader needs
        raise ModelLoadError(f"{arch.name}: config.json cannot be read ({_why(exc)})") from exc


def config_from_gguf(meta: dict[str, Any], name: str) -> ModelConfig:
    arch = for_gguf(meta)
    gguf_arch = meta["general.architecture"]
    try:
        return arch.from_gguf(meta, gguf_arch, name)
    except (KeyError, TypeError, ValueError) as exc:   # metadata missing a key the reader needs
        raise ModelLoadError(f"{arch.name}: the GGUF metadata cannot be read ({_why(exc)}; "
                             f"llama.cpp's keys are {gguf_arch}.block_count, {gguf_arch}.attention.head_count, ...)") from exc


def _why(exc: Exception) -> str:
    return f"missing field {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)


_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_MIXTRAL_EXPERT = re.compile(r"^block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight$")
_MIXTRAL_W = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}


def hf_weights(cfg: ModelConfig, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors (Hugging Face names) -> the decoder's names. Tensors the decoder
    does not read (rotary caches, vision towers) are dropped."""
    arch = architecture(cfg.arch)
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if name.startswith("language_model."):
            name = name[len("language_model."):]
        if arch.hf_norm_plus_one and name.endswith("norm.weight"):
            t = t.float() + 1.0
        m = _LAYER.match(name)
        if not m:
            if name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
                out[name] = t
            continue
        layer, rest = m.groups()
        for suffix, tensor in _layer_tensors(cfg, arch, rest, t):
            out[f"model.layers.{layer}.{suffix}"] = tensor
    return out


def _layer_tensors(cfg: ModelConfig, arch: Architecture, rest: str, t: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    rest = arch.hf_names.get(rest, rest)
    H, KV, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    if rest == "self_attn.qkv_proj.weight":               # Phi-3: q | k | v rows
        q, k, v = t.split([H * D, KV * D, KV * D])
        yield from (("self_attn.q_proj.weight", q), ("self_attn.k_proj.weight", k), ("self_attn.v_proj.weight", v))
    elif rest == "mlp.gate_up_proj.weight":               # Phi-3: gate | up rows
        gate, up = t.chunk(2)
        yield from (("mlp.gate_proj.weight", gate), ("mlp.up_proj.weight", up))
    elif rest in ("mlp.experts.gate_up_proj", "mlp.experts.gate_up_proj.weight"):   # transformers 5: [E, 2F, hidden]
        for e in range(t.shape[0]):
            gate, up = t[e].chunk(2)
            yield from ((f"mlp.experts.{e}.gate_proj.weight", gate), (f"mlp.experts.{e}.up_proj.weight", up))
    elif rest in ("mlp.experts.down_proj", "mlp.experts.down_proj.weight"):         # [E, hidden, F]
        for e in range(t.shape[0]):
            yield f"mlp.experts.{e}.down_proj.weight", t[e]
    elif (m := _MIXTRAL_EXPERT.match(rest)):
        yield f"mlp.experts.{m.group(1)}.{_MIXTRAL_W[m.group(2)]}.weight", t
    elif "rotary_emb" not in rest:
        yield rest, t
