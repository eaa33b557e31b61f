"""The layers every architecture of the family shares: RMSNorm, the RoPE variants and their
per-layer tables, the attention inputs (q/k/v projection, q/k norms, rotation) and the MLP.

Each architecture (models/arch/) only says which of these it uses, through ModelConfig; the
decoder (models/decoder.py) wires them together. Tensors follow Hugging Face's layouts: q/k heads
in the half-split (rotate_half) RoPE layout, norm weights as the multiplier itself (Gemma's 1 + w
is folded at load time).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from sgrun.errors import ModelLoadError
from sgrun.models.config import ModelConfig
from sgrun.models.quant_linear import Linear

ROPE_TYPES = ("default", "linear", "llama3", "freq_factors", "longrope")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim, in x's dtype."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def rope_kind(scaling: dict | None) -> str:
    kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"
    return "longrope" if kind == "su" else kind


def check_rope_scaling(arch: str, scaling: dict | None) -> None:
    """A rope scaling sgrun cannot reproduce is a load error, never a silently different model."""
    kind = rope_kind(scaling)
    if kind not in ROPE_TYPES:
        raise ModelLoadError(f"{arch}: rope scaling {kind!r} is not supported "
                             f"(supported: {', '.join(ROPE_TYPES)})")


def longrope_long(cfg: ModelConfig, context: int) -> bool:
    """Whether a LongRoPE model runs its long factors at a context of `context` tokens: llama.cpp's
    rule, decided once for every position, when the context exceeds the original one (Phi-4-mini:
    4,096). transformers decides per forward, from the sequence's length instead, so the two agree
    on a sequence longer than the original context and on an engine held to the original context."""
    scaling = cfg.rope_scaling or {}
    if rope_kind(scaling) != "longrope" or not scaling.get("long_factor"):
        return False
    return context > int(scaling["original_max_position_embeddings"])


def rope_inv_freq(cfg: ModelConfig, theta: float | None = None, scaling: dict | None | bool = True,
                  long_factors: bool = False) -> torch.Tensor:
    """Inverse frequencies [rotary_dim / 2] (float32) for base `theta` (default cfg.rope_theta)
    under `scaling` (default cfg.rope_scaling; None: unscaled); `long_factors`: LongRoPE's long
    ones (longrope_long), else its short ones."""
    dim = cfg.rotary_dim or cfg.head_dim
    base = cfg.rope_theta if theta is None else theta
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = (cfg.rope_scaling if scaling is True else scaling) or {}
    kind = rope_kind(scaling)
    if kind == "linear":
        inv_freq = inv_freq / float(scaling["factor"])
    elif kind == "llama3":
        # transformers' _compute_llama3_parameters, in float64.
        factor = float(scaling["factor"])
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_ctx = float(scaling.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_ctx / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= old_ctx / low) & (wavelen >= old_ctx / high)
        inv_freq = torch.where(mid, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)
    elif kind == "freq_factors":
        # llama.cpp's rope_freqs tensor (Llama 3.1/3.2 GGUF): theta_i / factor_i, the factors as stored.
        inv_freq = inv_freq / torch.tensor(scaling["factors"], dtype=torch.float64)
    elif kind == "longrope":
        # Phi-3.5 / Phi-4-mini: per-frequency factors, short or long by the context (longrope_long).
        factors = scaling["long_factor"] if long_factors else scaling["short_factor"]
        inv_freq = inv_freq / torch.tensor(factors, dtype=torch.float64)
    elif kind != "default":
        check_rope_scaling(cfg.arch, scaling)
    return inv_freq.float()


def rope_attention_factor(cfg: ModelConfig, scaling: dict | None) -> float:
    """The factor cos and sin are multiplied by (LongRoPE's; 1 otherwise)."""
    if rope_kind(scaling) != "longrope":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    orig = float(scaling["original_max_position_embeddings"])
    factor = float(scaling.get("factor") or cfg.max_position / orig)
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))


def rope_table(cfg: ModelConfig, inv_freq: torch.Tensor, attention_factor: float = 1.0,
               device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each [max_position, rotary_dim] in the half-split layout, in `dtype`."""
    freqs = torch.outer(torch.arange(cfg.max_position, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    return cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)


def rope_tables(cfg: ModelConfig, device: torch.device | str, dtype: torch.dtype, long_factors: bool = False
                ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[int | None]]:
    """The model's RoPE tables and each layer's index into them (None: no RoPE on that layer).
    Table 0 is the global one (cfg.rope_theta with cfg.rope_scaling; `long_factors`: LongRoPE's
    long ones); table 1, when the config has `rope_local_theta`, is the sliding layers' (Gemma3:
    base 10,000, never scaled)."""
    check_rope_scaling(cfg.arch, cfg.rope_scaling)
    tables = [rope_table(cfg, rope_inv_freq(cfg, long_factors=long_factors),
                         rope_attention_factor(cfg, cfg.rope_scaling), device, dtype)]
    local = None
    if cfg.rope_local_theta is not None:
        tables.append(rope_table(cfg, rope_inv_freq(cfg, cfg.rope_local_theta, None), 1.0, device, dtype))
        local = 1
    per_layer: list[int | None] = []
    for i in range(cfg.num_layers):
        if cfg.nope_layers and cfg.nope_layers[i]:
            per_layer.append(None)
        elif local is not None and cfg.window(i) is not None:
            per_layer.append(local)
        else:
            per_layer.append(0)
    return tables, per_layer


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE with the precomputed cos/sin rows of each token's position (broadcast over heads)."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE over the first cos.shape[-1] dims of each head (partial rotary: the rest pass through)."""
    rd = cos.shape[-1]
    if rd == x.shape[-1]:
        return rotate_half(x, cos, sin)
    return torch.cat([rotate_half(x[..., :rd], cos, sin), x[..., rd:]], dim=-1)


def project_qkv(x: torch.Tensor, qkv: Linear, heads: tuple[int, int, int], dtype: torch.dtype,
                qk_norm: str | None, q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, eps: float,
                cos: torch.Tensor | None, sin: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normed input [T, hidden] -> q [T, H, D], k, v [T, KV, D] in the GEMM `dtype`: the fused
    projection (with its bias), the q/k norms (in float32), then RoPE where the layer has it
    (`cos` None: a NoPE layer)."""
    H, KV, D = heads
    T = x.shape[0]
    q, k, v = qkv(x.to(dtype)).split([H * D, KV * D, KV * D], dim=-1)
    if qk_norm == "full":
        q = rms_norm(q.float(), q_norm, eps).to(dtype)
        k = rms_norm(k.float(), k_norm, eps).to(dtype)
    q, k = q.reshape(T, H, D), k.reshape(T, KV, D)
    if qk_norm == "head":
        q = rms_norm(q.float(), q_norm, eps).to(dtype)
        k = rms_norm(k.float(), k_norm, eps).to(dtype)
    if cos is not None:
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    return q, k, v.reshape(T, KV, D)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def activation(name: str):
    """The MLP's activation function (module-level, so a built model pickles into the model cache)."""
    if name == "silu":
        return F.silu
    if name == "gelu_tanh":
        return gelu_tanh
    raise ModelLoadError(f"MLP activation {name!r} is not supported (supported: silu, gelu_tanh)")


HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}


def mlp(x: torch.Tensor, gate_up: Linear, down: Linear, act) -> torch.Tensor:
    """down(act(gate) * up) with gate and up fused in one linear."""
    gate, up = gate_up(x).chunk(2, dim=-1)
    return down(act(gate) * up)
