"""Read a GGUF file: metadata, config, dequantized weights in the decoder's naming and layout.

Tensors are read lazily (GGUFWeights): each is dequantized when the model reads it, so a model is
built one tensor at a time. The config comes from the architecture's reader (models/arch/); the tensors from llama.cpp's
shared naming (convert_hf_to_gguf.py / gguf-py's TENSOR_NAMES), mapped below, with its
conventions undone: q/k rows interleaved for the llama family, Phi-3's fused attn_qkv and
ffn_up (gate|up), 3-D expert tensors [experts, rows, cols], rope_freqs (Llama 3.1/3.2's llama3
factors) and rope_factors_long/short (LongRoPE) read into the config's rope scaling.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from sgrun.errors import ModelLoadError
from sgrun.models import arch as archs
from sgrun.models.config import ModelConfig
from sgrun.models.gguf_file import GGUFFile, GGUFTensor

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


@dataclass(frozen=True)
class _Source:
    """Where one decoder tensor lies in the file: a GGUF tensor, one expert of a 3-D expert
    tensor, a range of rows of a fused one (Phi-3's qkv and gate|up), with llama.cpp's Q/K row
    interleaving to undo. Expert and row slices are cut from the quantized bytes, so only the
    slice is read and dequantized."""
    tensor: GGUFTensor
    expert: int | None = None
    rows: tuple[int, int] | None = None
    unpermute_heads: int | None = None

    def raw(self) -> np.ndarray:
        data = self.tensor.data if self.expert is None else self.tensor.data[self.expert]
        return data if self.rows is None else data[self.rows[0]:self.rows[1]]

    @property
    def shape(self) -> tuple[int, ...]:
        shape = self.tensor.shape if self.expert is None else self.tensor.shape[1:]
        return shape if self.rows is None else (self.rows[1] - self.rows[0], *shape[1:])

    def read(self) -> np.ndarray:
        """float32, in the decoder's layout (a fresh array: nothing refers to the file)."""
        arr = np.asarray(dequantize(self.raw(), self.tensor.qtype), dtype=np.float32).reshape(self.shape)
        if self.unpermute_heads is not None:
            arr = _unpermute_rope(arr, self.unpermute_heads)
        return np.array(arr, dtype=np.float32, copy=True)


class GGUFWeights(Mapping[str, torch.Tensor]):
    """The decoder's tensors of one GGUF file, each dequantized when it is read and not kept:
    a model is built one tensor at a time (DecoderModel reads each once and packs it), so loading
    holds the packed model plus one tensor's float copy, never the whole file in float32, and the
    file's pages are given back after each read. `shape(name)` answers without reading."""

    def __init__(self, gguf: GGUFFile, sources: dict[str, _Source], dtype: torch.dtype):
        self.gguf, self.sources, self.dtype = gguf, sources, dtype

    def __getitem__(self, name: str) -> torch.Tensor:
        src = self.sources[name]
        arr = src.read()
        self.gguf.release(src.raw())
        return torch.from_numpy(arr).to(self.dtype)

    def __iter__(self) -> Iterator[str]:
        return iter(self.sources)

    def __len__(self) -> int:
        return len(self.sources)

    def __contains__(self, name: object) -> bool:
        return name in self.sources

    def shape(self, name: str) -> tuple[int, ...]:
        return self.sources[name].shape

    def rows(self, name: str) -> "RowBlocks":
        """The tensor as a reader of row blocks (the embedding table: ~2.5 GB in float32 for
        Phi-4-mini's 200k x 3072, quantized block by block instead)."""
        return RowBlocks(self, name)


class RowBlocks:
    """A 2-D tensor of a GGUFWeights read `rows(start, stop)` at a time, float32 (quant_linear's
    row-block readers take it in place of a tensor)."""

    def __init__(self, weights: GGUFWeights, name: str):
        self.weights, self.src = weights, weights.sources[name]
        self.shape = self.src.shape
        self.device = torch.device("cpu")

    def rows(self, start: int, stop: int) -> torch.Tensor:
        if self.src.rows is not None or self.src.unpermute_heads is not None:
            raise ValueError("row blocks are read from whole, unpermuted tensors only")
        src = _Source(self.src.tensor, self.src.expert, (start, stop), None)
        arr = src.read()
        self.weights.gguf.release(src.raw())
        return torch.from_numpy(arr)


def _layer_sources(cfg: ModelConfig, gguf_arch: str, permuted: bool, layer: str, rest: str,
                   t: GGUFTensor) -> list[tuple[str, _Source]]:
    p = f"model.layers.{layer}."
    H, KV, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    if rest in _EXPERT_NAMES:
        return [(f"{p}mlp.experts.{e}.{_EXPERT_NAMES[rest]}.weight", _Source(t, expert=e)) for e in range(t.shape[0])]
    if rest == "attn_qkv.weight":                           # Phi-3
        q, k = H * D, (H + KV) * D
        return [(p + "self_attn.q_proj.weight", _Source(t, rows=(0, q))),
                (p + "self_attn.k_proj.weight", _Source(t, rows=(q, k))),
                (p + "self_attn.v_proj.weight", _Source(t, rows=(k, t.shape[0])))]
    if rest == "ffn_up.weight" and gguf_arch == "phi3":     # gate | up rows
        half = t.shape[0] // 2
        return [(p + "mlp.gate_proj.weight", _Source(t, rows=(0, half))),
                (p + "mlp.up_proj.weight", _Source(t, rows=(half, t.shape[0])))]
    if rest not in _LAYER_NAMES:
        return []
    heads = None
    if permuted and rest in ("attn_q.weight", "attn_q.bias"):
        heads = H
    elif permuted and rest in ("attn_k.weight", "attn_k.bias"):
        heads = KV
    return [(p + _LAYER_NAMES[rest], _Source(t, unpermute_heads=heads))]


_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}
_ROPE_NAMES = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def load_gguf(path: Path, dtype: torch.dtype) -> tuple[ModelConfig, dict[str, Any], GGUFWeights]:
    """Weights dequantized to `dtype` as they are read (GGUFWeights); meta carries the file's
    quantization under "sgrun.file_quantization" so the model can re-quantize to the same width."""
    gguf = GGUFFile(path)
    meta = dict(gguf.metadata)
    meta["sgrun.file_quantization"] = file_quantization(gguf)
    arch = archs.for_gguf(meta)
    gguf_arch = meta["general.architecture"]
    cfg = archs.config_from_gguf(meta, path.stem)
    permuted = gguf_arch in arch.gguf_permuted_qk
    sources: dict[str, _Source] = {}
    rope: dict[str, list[float]] = {}
    for t in gguf.tensors:
        name = t.name
        if name.startswith("blk."):
            _, layer, rest = name.split(".", 2)
            if rest not in _LAYER_NAMES and rest not in _EXPERT_NAMES and rest not in ("attn_qkv.weight",):
                continue
        elif name not in _TOP_NAMES and name not in _ROPE_NAMES:
            continue
        if t.qtype not in _SUPPORTED_TYPES:
            raise ModelLoadError(f"tensor {t.name} has GGML type {t.qtype.name}, which sgrun cannot dequantize "
                                 f"(supported: {', '.join(sorted(q.name for q in _SUPPORTED_TYPES))})")
        if name.startswith("blk."):
            sources.update(_layer_sources(cfg, gguf_arch, permuted, layer, rest, t))
        elif name in _ROPE_NAMES:
            rope[name] = _Source(t).read().reshape(-1).tolist()
        else:
            sources[_TOP_NAMES[name]] = _Source(t)
    _rope_from_tensors(cfg, rope)
    if "model.embed_tokens.weight" not in sources:
        raise ModelLoadError(f"{cfg.arch} GGUF {path.name}: tensor 'token_embd.weight' is missing")
    cfg.tie_embeddings = "lm_head.weight" not in sources
    cfg.vocab_size = sources["model.embed_tokens.weight"].shape[0]
    return cfg, meta, GGUFWeights(gguf, sources, dtype)


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
