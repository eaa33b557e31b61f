"""Read a GGUF file: metadata, config, dequantized weights in Hugging Face naming and layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from sgrun.errors import ModelLoadError
from sgrun.models.config import ModelConfig
from sgrun.models.gguf_file import GGUFFile

SUPPORTED_ARCHS = {"llama", "qwen2", "mistral"}
_SUPPORTED_TYPES = {
    GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16,
    GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1,
    GGMLQuantizationType.Q5_0, GGMLQuantizationType.Q5_1, GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q5_K, GGMLQuantizationType.Q6_K,
}

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def config_from_metadata(meta: dict[str, Any], name: str) -> ModelConfig:
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ModelLoadError(f"GGUF architecture {arch!r} is not supported (supported: {sorted(SUPPORTED_ARCHS)})")

    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    vocab = int(get("vocab_size") or len(meta["tokenizer.ggml.tokens"]))
    scaling = None
    if get("rope.scaling.type") == "linear":
        scaling = {"rope_type": "linear", "factor": float(get("rope.scaling.factor"))}
    return ModelConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=int(get("feed_forward_length")),
        num_layers=int(get("block_count")),
        num_heads=heads,
        num_kv_heads=int(get("attention.head_count_kv") or heads),
        head_dim=int(get("attention.key_length") or hidden // heads),
        max_position=int(get("context_length", 4096)),
        rms_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rope_scaling=scaling,
        qkv_bias=arch == "qwen2",
        name=name,
    )


# What each GGML type becomes under the default quantization ("follow the file").
_FILE_QUANT = {
    GGMLQuantizationType.Q4_0: "int4", GGMLQuantizationType.Q4_1: "int4", GGMLQuantizationType.Q4_K: "int4",
    GGMLQuantizationType.Q5_0: "int8", GGMLQuantizationType.Q5_1: "int8", GGMLQuantizationType.Q5_K: "int8",
    GGMLQuantizationType.Q6_K: "int8", GGMLQuantizationType.Q8_0: "int8",
}


def file_quantization(gguf: GGUFFile) -> str:
    """The quantization the file's layer linears use, as sgrun names it (none, int8, int4):
    the most common one among the block weights, so a mixed file follows its bulk."""
    counts: dict[str, int] = {}
    for t in gguf.tensors:
        if t.name.startswith("blk.") and t.name.endswith(".weight") and len(t.shape) == 2:
            mode = _FILE_QUANT.get(t.qtype, "none")
            counts[mode] = counts.get(mode, 0) + 1
    return max(counts, key=counts.get) if counts else "none"


def _unpermute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp stores Q/K rows interleaved for its RoPE; undo it to Hugging Face's half-split layout."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def load_gguf(path: Path, dtype: torch.dtype) -> tuple[ModelConfig, dict[str, Any], dict[str, torch.Tensor]]:
    """Weights dequantized to `dtype`; meta carries the file's quantization under
    "sgrun.file_quantization" so the model can re-quantize to the same width."""
    gguf = GGUFFile(path)
    meta = dict(gguf.metadata)
    meta["sgrun.file_quantization"] = file_quantization(gguf)
    cfg = config_from_metadata(meta, name=path.stem)
    arch = meta["general.architecture"]
    weights: dict[str, torch.Tensor] = {}
    # disable=None: a progress bar on a terminal, silence in logs and tests.
    for t in tqdm(gguf.tensors, desc=f"loading {path.name}", unit="tensor", disable=None, leave=False):
        if t.qtype not in _SUPPORTED_TYPES:
            raise ModelLoadError(f"tensor {t.name} has GGML type {t.qtype.name}, which sgrun cannot dequantize")
        arr = np.asarray(dequantize(t.data, t.qtype), dtype=np.float32).reshape(t.shape)
        name = t.name
        if name.startswith("blk."):
            _, layer, rest = name.split(".", 2)
            if rest not in _LAYER_NAMES:
                continue
            hf = f"model.layers.{layer}.{_LAYER_NAMES[rest]}"
            if arch in ("llama", "mistral") and rest in ("attn_q.weight", "attn_q.bias"):
                arr = _unpermute_rope(arr, cfg.num_heads)
            elif arch in ("llama", "mistral") and rest in ("attn_k.weight", "attn_k.bias"):
                arr = _unpermute_rope(arr, cfg.num_kv_heads)
        elif name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        elif name == "output.weight":
            hf = "lm_head.weight"
        else:
            continue
        weights[hf] = torch.from_numpy(np.array(arr, dtype=np.float32, copy=True)).to(dtype)
    cfg.tie_embeddings = "lm_head.weight" not in weights
    cfg.vocab_size = weights["model.embed_tokens.weight"].shape[0]
    return cfg, meta, weights
