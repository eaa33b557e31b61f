"""Read a GGUF file: metadata, config, dequantized weights in the decoder's naming and layout.

The config comes from the architecture's reader (models/arch/); the tensors from llama.cpp's
shared naming (convert_hf_to_gguf.py / gguf-py's TENSOR_NAMES), mapped below, with its
conventions undone: q/k rows interleaved for the llama family, Phi-3's fused attn_qkv and
ffn_up (gate|up), 3-D expert tensors [experts, rows, cols], rope_freqs (Llama 3.1/3.2's llama3
factors) and rope_factors_long/short (LongRoPE) read into the config's rope scaling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from sgrun.errors import ModelLoadError
from sgrun.models import arch as archs
from sgrun.models.config import ModelConfig
from sgrun.models.gguf_file import GGUFFile

_SUPPORTED_TYPES = {
    GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16,
    GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1,
    GGMLQuantizationType.Q5_0, GGMLQuantizationType.Q5_1, GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q5_K, GGMLQuantizationType.Q6_K,
}

# llama.cpp's per-block tensor names -> the decoder's (models/decoder.py).
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",     # Gemma3: pre_feedforward_layernorm
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "post_attention_norm.weight": "attn_out_norm.weight",
    "post_ffw_norm.weight": "mlp_out_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "mlp.router.weight",
}
_EXPERT_NAMES = {"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj", "ffn_down_exps.weight": "down_proj"}


def config_from_metadata(meta: dict[str, Any], name: str) -> ModelConfig:
    return archs.config_from_gguf(meta, name)


# What each GGML type becomes under the default quantization ("follow the file").
_FILE_QUANT = {
    GGMLQuantizationType.Q4_0: "int4", GGMLQuantizationType.Q4_1: "int4", GGMLQuantizationType.Q4_K: "int4",
    GGMLQuantizationType.Q5_0: "int8", GGMLQuantizationType.Q5_1: "int8", GGMLQuantizationType.Q5_K: "int8",
    GGMLQuantizationType.Q6_K: "int8", GGMLQuantizationType.Q8_0: "int8",
}


def file_quantization(gguf: GGUFFile) -> str:
    """The quantization the file's layer linears use, as sgrun names it (none, int8, int4):
    the most common one among the block weights (experts included), so a mixed file follows its bulk."""
    counts: dict[str, int] = {}
    for t in gguf.tensors:
        if t.name.startswith("blk.") and t.name.endswith(".weight") and len(t.shape) in (2, 3):
            mode = _FILE_QUANT.get(t.qtype, "none")
            counts[mode] = counts.get(mode, 0) + (t.shape[0] if len(t.shape) == 3 else 1)
    return max(counts, key=counts.get) if counts else "none"


def _unpermute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp stores Q/K rows interleaved for its RoPE; undo it to Hugging Face's half-split layout."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _layer_tensors(cfg: ModelConfig, gguf_arch: str, permuted: bool, layer: str, rest: str,
                   arr: np.ndarray) -> list[tuple[str, np.ndarray]]:
    p = f"model.layers.{layer}."
    H, KV, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    if rest in _EXPERT_NAMES:
        return [(f"{p}mlp.experts.{e}.{_EXPERT_NAMES[rest]}.weight", arr[e]) for e in range(arr.shape[0])]
    if rest == "attn_qkv.weight":                           # Phi-3
        q, k, v = np.split(arr, [H * D, (H + KV) * D])
        return [(p + "self_attn.q_proj.weight", q), (p + "self_attn.k_proj.weight", k), (p + "self_attn.v_proj.weight", v)]
    if rest == "ffn_up.weight" and gguf_arch == "phi3":     # gate | up rows
        gate, up = np.split(arr, 2)
        return [(p + "mlp.gate_proj.weight", gate), (p + "mlp.up_proj.weight", up)]
    if rest not in _LAYER_NAMES:
        return []
    if permuted and rest in ("attn_q.weight", "attn_q.bias"):
        arr = _unpermute_rope(arr, H)
    elif permuted and rest in ("attn_k.weight", "attn_k.bias"):
        arr = _unpermute_rope(arr, KV)
    return [(p + _LAYER_NAMES[rest], arr)]


def load_gguf(path: Path, dtype: torch.dtype) -> tuple[ModelConfig, dict[str, Any], dict[str, torch.Tensor]]:
    """Weights dequantized to `dtype`; meta carries the file's quantization under
    "sgrun.file_quantization" so the model can re-quantize to the same width."""
    gguf = GGUFFile(path)
    meta = dict(gguf.metadata)
    meta["sgrun.file_quantization"] = file_quantization(gguf)
    arch = archs.for_gguf(meta)
    gguf_arch = meta["general.architecture"]
    cfg = archs.config_from_gguf(meta, path.stem)
    permuted = gguf_arch in arch.gguf_permuted_qk
    weights: dict[str, torch.Tensor] = {}
    rope: dict[str, list[float]] = {}
    # disable=None: a progress bar on a terminal, silence in logs and tests.
    for t in tqdm(gguf.tensors, desc=f"loading {path.name}", unit="tensor", disable=None, leave=False):
        if t.qtype not in _SUPPORTED_TYPES:
            raise ModelLoadError(f"tensor {t.name} has GGML type {t.qtype.name}, which sgrun cannot dequantize "
                                 f"(supported: {', '.join(sorted(q.name for q in _SUPPORTED_TYPES))})")
        name = t.name
        if name.startswith("blk."):
            _, layer, rest = name.split(".", 2)
            if rest not in _LAYER_NAMES and rest not in _EXPERT_NAMES and rest not in ("attn_qkv.weight",):
                continue
        elif name not in ("token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight",
                          "rope_factors_long.weight", "rope_factors_short.weight"):
            continue
        arr = np.asarray(dequantize(t.data, t.qtype), dtype=np.float32).reshape(t.shape)
        if name.startswith("blk."):
            pairs = _layer_tensors(cfg, gguf_arch, permuted, layer, rest, arr)
        elif name.startswith("rope_"):
            rope[name] = arr.reshape(-1).tolist()
            continue
        else:
            pairs = [({"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                       "output.weight": "lm_head.weight"}[name], arr)]
        for hf, a in pairs:
            weights[hf] = torch.from_numpy(np.array(a, dtype=np.float32, copy=True)).to(dtype)
    _rope_from_tensors(cfg, rope)
    if "model.embed_tokens.weight" not in weights:
        raise ModelLoadError(f"{cfg.arch} GGUF {path.name}: tensor 'token_embd.weight' is missing")
    cfg.tie_embeddings = "lm_head.weight" not in weights
    cfg.vocab_size = weights["model.embed_tokens.weight"].shape[0]
    return cfg, meta, weights


def _rope_from_tensors(cfg: ModelConfig, rope: dict[str, list[float]]) -> None:
    """Rope scaling stored as tensors: Llama 3.1/3.2's rope_freqs (one divisor per frequency,
    llama.cpp's freq_factors) and Phi-3's LongRoPE factors."""
    if "rope_freqs.weight" in rope:
        cfg.rope_scaling = {"rope_type": "freq_factors", "factors": rope["rope_freqs.weight"]}
    if "rope_factors_short.weight" in rope:
        orig = cfg.extra.get("rope_original_context") or cfg.max_position
        cfg.rope_scaling = {"rope_type": "longrope", "short_factor": rope["rope_factors_short.weight"],
                            "long_factor": rope.get("rope_factors_long.weight"),
                            "original_max_position_embeddings": int(orig),
                            "factor": cfg.max_position / int(orig),
                            "attention_factor": cfg.extra.get("rope_attn_factor")}
