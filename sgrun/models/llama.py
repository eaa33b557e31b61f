"""Llama-family decoder (Llama, SmolLM, Mistral, Qwen2-style qkv bias) in plain torch.

The model sees one flat batch of tokens from many requests (varlen, no padding) and reads and
writes K/V through the paged pool; attention itself is delegated to an AttentionBackend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from sgrun.models.config import ModelConfig
from sgrun.models.quant_linear import QUANT_MODES, Int8Linear, Linear, make_linear


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = cfg.rope_scaling or {}
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind == "linear":
        inv_freq = inv_freq / float(scaling["factor"])
    elif kind == "llama3":
        factor = float(scaling["factor"])
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_ctx = float(scaling.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_ctx / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= old_ctx / low) & (wavelen >= old_ctx / high)
        inv_freq = torch.where(mid, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)
    return inv_freq.float()


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor
    qkv: Linear                  # [(H + 2*KV) * D, hidden]: q, k, v projections fused (with qkv bias)
    o: Linear
    mlp_norm: torch.Tensor
    gate_up: Linear              # [2 * intermediate, hidden]: gate and up fused
    down: Linear


class LlamaModel:
    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], dtype: torch.dtype,
                 quantization: str = "none", device: str | torch.device = "cpu",
                 residual_dtype: torch.dtype = torch.float32):
        """quantization: none (dense `dtype`), int8 or int4 for the layer linears; with either,
        the embedding table and lm_head are kept int8. `device`: where every tensor lives,
        converted tensor by tensor (no second full copy on the host).

        `dtype` is the GEMM and KV dtype. The residual stream, the norms and the lm_head run in
        `residual_dtype` (float32 unless told otherwise): with bf16 GEMMs, a bf16 residual stream
        and bf16-rounded logits are the two big error sources (a bf16 step at logit size ~20 is
        0.125, more than many top-2 gaps), and removing them costs a few percent of decode time
        (benchmarks/bench_bf16_accuracy.py, 1 December 2026). `residual_dtype=dtype` is the all-bf16 path, kept to measure that."""
        if quantization not in QUANT_MODES:
            raise ValueError(f"quantization must be one of {', '.join(QUANT_MODES)}; got {quantization!r}")
        self.cfg = cfg
        self.dtype = dtype
        self.quantization = quantization
        self.device = dev = torch.device(device)
        self.residual_dtype = residual_dtype

        def w(name: str, dt: torch.dtype = dtype) -> torch.Tensor:
            return weights[name].to(device=dev, dtype=dt).contiguous()

        def lin(names: list[str], bias: torch.Tensor | None = None) -> Linear:
            # Fused projections are concatenated before quantizing (rows never share a group).
            return make_linear(torch.cat([weights[n].to(dev) for n in names]), bias, quantization, dtype)

        if quantization == "none":
            self.embed_table: Int8Linear | None = None
            self.embed = w("model.embed_tokens.weight")
            head_name = "model.embed_tokens.weight" if cfg.tie_embeddings else "lm_head.weight"
            # From the file's weights, not the rounded embed copy; one table when tied in one dtype.
            head = self.embed if cfg.tie_embeddings and residual_dtype == dtype else w(head_name, residual_dtype)
            self.lm_head: Linear = make_linear(head, None, "none", residual_dtype)
        else:
            self.embed_table = Int8Linear(weights["model.embed_tokens.weight"].to(dev), None, dtype)
            head_name = "model.embed_tokens.weight" if cfg.tie_embeddings else "lm_head.weight"
            self.lm_head = (self.embed_table if cfg.tie_embeddings and residual_dtype == dtype
                            else Int8Linear(weights[head_name].to(dev), None, residual_dtype))
        self.final_norm = w("model.norm.weight", residual_dtype)
        self.layers: list[LayerWeights] = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            bias = None
            if cfg.qkv_bias and f"{p}self_attn.q_proj.bias" in weights:
                bias = torch.cat([w(f"{p}self_attn.{n}_proj.bias") for n in "qkv"])
            self.layers.append(LayerWeights(
                attn_norm=w(f"{p}input_layernorm.weight", residual_dtype),
                qkv=lin([f"{p}self_attn.{n}_proj.weight" for n in "qkv"], bias),
                o=lin([f"{p}self_attn.o_proj.weight"]),
                mlp_norm=w(f"{p}post_attention_layernorm.weight", residual_dtype),
                gate_up=lin([f"{p}mlp.gate_proj.weight", f"{p}mlp.up_proj.weight"]),
                down=lin([f"{p}mlp.down_proj.weight"]),
            ))
        freqs = torch.outer(torch.arange(cfg.max_position, dtype=torch.float32), rope_inv_freq(cfg))
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos = emb.cos().to(device=dev, dtype=dtype)
        self.sin = emb.sin().to(device=dev, dtype=dtype)
        # Tensor parallelism sets this to an in-place all-reduce: a shard's o and down projections
        # are row-parallel, so each yields a partial sum (sgrun/models/tensor_parallel.py).
        self.all_reduce = None

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn, logit_rows: torch.Tensor) -> torch.Tensor:
        """input_ids, positions: [T]; attn: an AttentionBackend prepared for this batch;
        logit_rows: which of the T rows need logits. Returns float32 logits [len(logit_rows), V]."""
        return self.run_layers(input_ids, positions, attn, logit_rows, EAGER_BLOCKS, self.lm_head)

    def run_layers(self, input_ids: torch.Tensor, positions: torch.Tensor, attn, logit_rows: torch.Tensor,
                   blocks: "LayerBlocks", lm_head: Callable) -> torch.Tensor:
        """The layer loop around attention, with the blocks between two attention calls given:
        the eager functions below, or their torch.compile'd versions (compiled_forward.py)."""
        cfg = self.cfg
        heads = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
        cos = self.cos[positions].unsqueeze(1)
        sin = self.sin[positions].unsqueeze(1)
        dt, eps, reduce = self.dtype, cfg.rms_eps, self.all_reduce
        h = self.embed[input_ids] if self.embed_table is None else self.embed_table.rows(input_ids)
        h = h.to(self.residual_dtype)
        layers = self.layers
        q, k, v = blocks.first(h, layers[0].attn_norm, layers[0].qkv, cos, sin, heads, eps, dt)
        for li, lw in enumerate(layers[:-1]):
            o = attn.forward(li, q, k, v)
            nxt = layers[li + 1]
            h, q, k, v = blocks.inner(h, o, lw.o, lw.mlp_norm, lw.gate_up, lw.down, nxt.attn_norm, nxt.qkv,
                                      cos, sin, heads, eps, dt, reduce)
        lw = layers[-1]
        o = attn.forward(len(layers) - 1, q, k, v)
        _, x = blocks.last(h, o, lw.o, lw.mlp_norm, lw.gate_up, lw.down, self.final_norm, eps, dt, reduce)
        # Final norm and lm_head in the residual dtype: logits are never rounded to bf16.
        return lm_head(x[logit_rows]).float()


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE with the precomputed cos/sin rows of each token's position (broadcast over heads)."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


def attention_inputs(x: torch.Tensor, qkv: Linear, cos: torch.Tensor, sin: torch.Tensor,
                     heads: tuple[int, int, int], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normed input [T, hidden] (residual dtype) -> q [T, H, D], k, v [T, KV, D] in the GEMM
    `dtype`, q and k rotated."""
    H, KV, D = heads
    T = x.shape[0]
    qk, v = qkv(x.to(dtype)).split([(H + KV) * D, KV * D], dim=-1)
    qk = rotate_half(qk.view(T, H + KV, D), cos, sin)  # q and k heads rotated together
    q, k = qk.split([H, KV], dim=1)
    return q, k, v.reshape(T, KV, D)


def layer_tail(h: torch.Tensor, o: torch.Tensor, o_proj: Linear, mlp_norm: torch.Tensor, gate_up: Linear,
               down: Linear, next_norm: torch.Tensor, eps: float, dtype: torch.dtype,
               all_reduce=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Everything of a layer after attention: o projection + residual, MLP norm, gate/up,
    SiLU * up, down + residual; then the next layer's input norm. Returns (residual, normed
    input of the next layer), both in the residual dtype. `dtype`: the GEMM dtype."""
    T = h.shape[0]
    attn_out = o_proj(o.reshape(T, -1))
    h = h + (all_reduce(attn_out) if all_reduce is not None else attn_out)
    x = F.rms_norm(h, (h.shape[-1],), mlp_norm, eps).to(dtype)
    gate, up = gate_up(x).chunk(2, dim=-1)
    mlp_out = down(F.silu(gate) * up)
    h = h + (all_reduce(mlp_out) if all_reduce is not None else mlp_out)
    return h, F.rms_norm(h, (h.shape[-1],), next_norm, eps)


def first_block(h: torch.Tensor, norm: torch.Tensor, qkv: Linear, cos: torch.Tensor, sin: torch.Tensor,
                heads: tuple[int, int, int], eps: float, dtype: torch.dtype):
    """The embeddings -> layer 0's q, k, v."""
    return attention_inputs(F.rms_norm(h, (h.shape[-1],), norm, eps), qkv, cos, sin, heads, dtype)


def inner_block(h: torch.Tensor, o: torch.Tensor, o_proj: Linear, mlp_norm: torch.Tensor, gate_up: Linear,
                down: Linear, next_norm: torch.Tensor, next_qkv: Linear, cos: torch.Tensor, sin: torch.Tensor,
                heads: tuple[int, int, int], eps: float, dtype: torch.dtype, all_reduce=None):
    """Layer i's attention output -> layer i+1's q, k, v (and the residual): everything between
    two attention calls, one block so a compiled run calls one graph per layer."""
    h, x = layer_tail(h, o, o_proj, mlp_norm, gate_up, down, next_norm, eps, dtype, all_reduce)
    return (h, *attention_inputs(x, next_qkv, cos, sin, heads, dtype))


@dataclass(frozen=True)
class LayerBlocks:
    first: Callable    # first_block
    inner: Callable    # inner_block
    last: Callable     # layer_tail, with the final norm as the next norm


EAGER_BLOCKS = LayerBlocks(first_block, inner_block, layer_tail)
