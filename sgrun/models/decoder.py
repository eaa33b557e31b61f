"""The decoder every architecture of the family runs (models/arch/ lists them), in plain torch.

The model sees one flat batch of tokens from many requests (varlen, no padding) and reads and
writes K/V through the paged pool; attention itself is delegated to an AttentionBackend, which
the runner configures once with the model's attention scale and per-layer sliding windows.

Weights come in one naming whatever the file (each architecture's loader maps to it), Llama's
Hugging Face names extended:
  model.embed_tokens.weight, model.norm.weight, lm_head.weight (absent when tied), and per layer
  model.layers.{i}.: input_layernorm, self_attn.{q,k,v,o}_proj (+ q/k/v bias),
  self_attn.{q,k}_norm, post_attention_layernorm (the MLP's input norm), attn_out_norm and
  mlp_out_norm (the sandwich norms on the attention and MLP outputs), mlp.{gate,up,down}_proj,
  or on an MoE layer mlp.router and mlp.experts.{e}.{gate,up,down}_proj.
Norm weights are the multiplier itself (x * rsqrt(mean(x^2) + eps) * w).

A model that is plain Llama (cfg.llama_shaped) runs the layer loop through `LayerBlocks`, the
blocks between two attention calls that compiled_forward.py compiles; every other one runs the
general loop `run_family_layers`, the reference the fast paths are checked against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from sgrun.errors import ModelLoadError
from sgrun.models.config import ModelConfig
from sgrun.models.layers import (activation, longrope_long, project_qkv, rms_norm, rope_inv_freq, rope_tables,
                                 rotate_half)
from sgrun.models.moe import MoEWeights, moe_forward
from sgrun.models.quant_linear import QUANT_MODES, Int8Linear, Linear, make_linear

__all__ = ["DecoderModel", "LlamaModel", "LayerWeights", "MoEWeights", "LayerBlocks", "EAGER_BLOCKS",
           "rope_inv_freq", "rotate_half", "attention_inputs", "layer_tail", "first_block", "inner_block"]


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor
    qkv: Linear                  # [(H + 2*KV) * D, hidden]: q, k, v projections fused (with qkv bias)
    o: Linear
    mlp_norm: torch.Tensor       # the MLP's input norm (Gemma3: pre_feedforward_layernorm)
    gate_up: Linear | None       # [2 * intermediate, hidden]: gate and up fused; None on an MoE layer
    down: Linear | None
    q_norm: torch.Tensor | None = None          # float32 [head_dim] ("head") or [H*D] ("full")
    k_norm: torch.Tensor | None = None          # float32 [head_dim] or [KV*D]
    post_attn_norm: torch.Tensor | None = None  # sandwich norm on the attention output (Gemma3)
    post_mlp_norm: torch.Tensor | None = None   # sandwich norm on the MLP output
    moe: MoEWeights | None = None
    rope: int | None = 0          # index into model.rope_tables; None: no RoPE on this layer
    window: int | None = None     # sliding window: keys j with p - window < j <= p; None: global


class DecoderModel:
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

        missing = [n for n in required_weights(cfg) if n not in weights]
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise ModelLoadError(f"{cfg.arch} model {cfg.name!r}: tensor {missing[0]!r} is missing "
                                 f"({', '.join(missing[1:3]) + more + ' too; ' if len(missing) > 1 else ''}"
                                 f"a {cfg.arch} checkpoint needs every tensor models/decoder.py names)")
        # A file's weights (gguf_loader.GGUFWeights) are read as they are used, one at a time, and
        # say their shapes without reading; a plain dict holds tensors.
        shape_of = getattr(weights, "shape", None) or (lambda name: tuple(weights[name].shape))
        for name, shape in expected_shapes(cfg).items():
            if name in weights and tuple(shape_of(name)) != shape:
                raise ModelLoadError(f"{cfg.arch} model {cfg.name!r}: tensor {name!r} has shape "
                                     f"{list(shape_of(name))}, expected {list(shape)} from the config")

        def table(name: str):
            """A quantized table's source: read in row blocks where the weights can (the
            embedding is the largest tensor), else the tensor on the device."""
            return weights.rows(name) if hasattr(weights, "rows") and dev.type == "cpu" else weights[name].to(dev)

        def w(name: str, dt: torch.dtype = dtype) -> torch.Tensor:
            return weights[name].to(device=dev, dtype=dt).contiguous()

        def opt(name: str) -> torch.Tensor | None:
            return w(name, torch.float32) if name in weights else None

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
            self.embed_table = Int8Linear(table("model.embed_tokens.weight"), None, dtype)
            head_name = "model.embed_tokens.weight" if cfg.tie_embeddings else "lm_head.weight"
            self.lm_head = (self.embed_table if cfg.tie_embeddings and residual_dtype == dtype
                            else Int8Linear(table(head_name), None, residual_dtype))
        self.final_norm = w("model.norm.weight", residual_dtype)
        # LongRoPE's short or long factors follow the context the model runs at (layers.longrope_long):
        # the trained one until an engine says its own (use_context).
        self.long_rope = longrope_long(cfg, cfg.max_position)
        self.rope_tables, layer_rope = rope_tables(cfg, dev, dtype, self.long_rope)
        self.layers: list[LayerWeights] = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            bias = None
            if cfg.qkv_bias and f"{p}self_attn.q_proj.bias" in weights:
                bias = torch.cat([w(f"{p}self_attn.{n}_proj.bias") for n in "qkv"])
            moe = None
            if cfg.is_moe_layer(i):
                E = cfg.num_experts
                ex = f"{p}mlp.experts."
                moe = MoEWeights(router=w(f"{p}mlp.router.weight", torch.float32),
                                 gate_up=[lin([f"{ex}{e}.gate_proj.weight", f"{ex}{e}.up_proj.weight"]) for e in range(E)],
                                 down=[lin([f"{ex}{e}.down_proj.weight"]) for e in range(E)],
                                 top_k=cfg.experts_per_token, norm_topk_prob=cfg.norm_topk_prob)
            self.layers.append(LayerWeights(
                attn_norm=w(f"{p}input_layernorm.weight", residual_dtype),
                qkv=lin([f"{p}self_attn.{n}_proj.weight" for n in "qkv"], bias),
                o=lin([f"{p}self_attn.o_proj.weight"]),
                mlp_norm=w(f"{p}post_attention_layernorm.weight", residual_dtype),
                gate_up=None if moe else lin([f"{p}mlp.gate_proj.weight", f"{p}mlp.up_proj.weight"]),
                down=None if moe else lin([f"{p}mlp.down_proj.weight"]),
                q_norm=opt(f"{p}self_attn.q_norm.weight"), k_norm=opt(f"{p}self_attn.k_norm.weight"),
                post_attn_norm=opt(f"{p}attn_out_norm.weight"), post_mlp_norm=opt(f"{p}mlp_out_norm.weight"),
                moe=moe, rope=layer_rope[i], window=cfg.window(i),
            ))
        # Code that predates per-layer tables reads the global one here.
        self.cos, self.sin = self.rope_tables[0]
        self.act = activation(cfg.hidden_act)
        # Tensor parallelism sets this to an in-place all-reduce: a shard's o and down projections
        # are row-parallel, so each yields a partial sum (sgrun/models/tensor_parallel.py).
        self.all_reduce = None

    def use_context(self, context: int) -> None:
        """Run at a context of `context` tokens: LongRoPE's long factors for every position when it
        exceeds the original context, else the short ones (llama.cpp's rule). The engine calls it
        before its decode blocks bind the tables; engines that share one model in a process share
        the choice too (the last one built sets it)."""
        long = longrope_long(self.cfg, context)
        if long != self.long_rope:
            self.rope_tables, _ = rope_tables(self.cfg, self.device, self.dtype, long)
            self.cos, self.sin = self.rope_tables[0]
            self.long_rope = long

    @property
    def attn_scale(self) -> float:
        """The attention backends' softmax scale (configure(scale, windows))."""
        return self.cfg.attn_scale if self.cfg.attn_scale is not None else self.cfg.head_dim ** -0.5

    @property
    def layer_windows(self) -> list[int | None]:
        return [lw.window for lw in self.layers]

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn, logit_rows: torch.Tensor) -> torch.Tensor:
        """input_ids, positions: [T]; attn: an AttentionBackend prepared for this batch;
        logit_rows: which of the T rows need logits. Returns float32 logits [len(logit_rows), V]."""
        if not self.cfg.llama_shaped:
            return self.run_family_layers(input_ids, positions, attn, logit_rows)
        return self.run_layers(input_ids, positions, attn, logit_rows, EAGER_BLOCKS, self.lm_head)

    def embed_rows(self, input_ids: torch.Tensor) -> torch.Tensor:
        h = self.embed[input_ids] if self.embed_table is None else self.embed_table.rows(input_ids)
        h = h.to(self.residual_dtype)
        if self.cfg.embed_scale != 1.0:
            # transformers multiplies by the scale rounded to the embedding's dtype (Gemma).
            h = h * torch.tensor(self.cfg.embed_scale, dtype=self.dtype).to(self.residual_dtype)
        return h

    def run_family_layers(self, input_ids: torch.Tensor, positions: torch.Tensor, attn,
                          logit_rows: torch.Tensor) -> torch.Tensor:
        """The general layer loop: q/k norms, per-layer RoPE tables and windows, sandwich norms,
        MoE layers. The reference every fast path is checked against."""
        cfg = self.cfg
        if self.all_reduce is not None:
            raise ModelLoadError(f"tensor parallelism does not run {cfg.arch} models (only llama-shaped ones)")
        heads = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
        rd, eps, dt = self.residual_dtype, cfg.rms_eps, self.dtype
        rows = [(c[positions].unsqueeze(1), s[positions].unsqueeze(1)) for c, s in self.rope_tables]
        h = self.embed_rows(input_ids)
        T = h.shape[0]
        for li, lw in enumerate(self.layers):
            cos, sin = rows[lw.rope] if lw.rope is not None else (None, None)
            q, k, v = project_qkv(rms_norm(h, lw.attn_norm, eps), lw.qkv, heads, dt, cfg.qk_norm,
                                  lw.q_norm, lw.k_norm, eps, cos, sin)
            a = lw.o(attn.forward(li, q, k, v).reshape(T, -1)).to(rd)
            if lw.post_attn_norm is not None:
                a = rms_norm(a, lw.post_attn_norm.to(rd), eps)
            h = h + a
            x = rms_norm(h, lw.mlp_norm, eps)
            if lw.moe is not None:
                m = moe_forward(x, x.to(dt), lw.moe, self.act).to(rd)
            else:
                gate, up = lw.gate_up(x.to(dt)).chunk(2, dim=-1)
                m = lw.down(self.act(gate) * up).to(rd)
            if lw.post_mlp_norm is not None:
                m = rms_norm(m, lw.post_mlp_norm.to(rd), eps)
            h = h + m
        x = rms_norm(h[logit_rows], self.final_norm, eps)
        logits = self.lm_head(x).float()
        if cfg.final_logit_softcap:
            logits = torch.tanh(logits / cfg.final_logit_softcap) * cfg.final_logit_softcap
        return logits

    def run_layers(self, input_ids: torch.Tensor, positions: torch.Tensor, attn, logit_rows: torch.Tensor,
                   blocks: "LayerBlocks", lm_head: Callable) -> torch.Tensor:
        """The layer loop around attention, with the blocks between two attention calls given:
        the eager functions below, or their torch.compile'd versions (compiled_forward.py)."""
        cfg = self.cfg
        heads = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
        cos = self.cos[positions].unsqueeze(1)
        sin = self.sin[positions].unsqueeze(1)
        dt, eps, reduce = self.dtype, cfg.rms_eps, self.all_reduce
        h = self.embed_rows(input_ids)
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


LlamaModel = DecoderModel   # the name the rest of sgrun (and its users) import


def required_weights(cfg: ModelConfig) -> list[str]:
    """Every tensor name the decoder reads for `cfg` (biases and optional norms excluded)."""
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not cfg.tie_embeddings:
        names.append("lm_head.weight")
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
        names += [f"{p}self_attn.{n}_proj.weight" for n in "qkvo"]
        if cfg.qk_norm:
            names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
        if cfg.sandwich_norm:
            names += [p + "attn_out_norm.weight", p + "mlp_out_norm.weight"]
        if cfg.is_moe_layer(i):
            names.append(p + "mlp.router.weight")
            names += [f"{p}mlp.experts.{e}.{n}_proj.weight" for e in range(cfg.num_experts) for n in ("gate", "up", "down")]
        else:
            names += [f"{p}mlp.{n}_proj.weight" for n in ("gate", "up", "down")]
    return names


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The shape the config implies for each tensor the decoder reads."""
    H, KV, D, hid, ff = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size, cfg.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, hid), "model.norm.weight": (hid,),
                                          "lm_head.weight": (cfg.vocab_size, hid)}
    qk = {"head": ((D,), (D,)), "full": ((H * D,), (KV * D,))}.get(cfg.qk_norm or "", None)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (hid,), p + "post_attention_layernorm.weight": (hid,),
                       p + "self_attn.q_proj.weight": (H * D, hid), p + "self_attn.k_proj.weight": (KV * D, hid),
                       p + "self_attn.v_proj.weight": (KV * D, hid), p + "self_attn.o_proj.weight": (hid, H * D),
                       p + "attn_out_norm.weight": (hid,), p + "mlp_out_norm.weight": (hid,)})
        if qk:
            shapes[p + "self_attn.q_norm.weight"], shapes[p + "self_attn.k_norm.weight"] = qk
        if cfg.is_moe_layer(i):
            mf = cfg.moe_intermediate_size
            shapes[p + "mlp.router.weight"] = (cfg.num_experts, hid)
            for e in range(cfg.num_experts):
                ex = f"{p}mlp.experts.{e}."
                shapes.update({ex + "gate_proj.weight": (mf, hid), ex + "up_proj.weight": (mf, hid),
                               ex + "down_proj.weight": (hid, mf)})
        else:
            shapes.update({p + "mlp.gate_proj.weight": (ff, hid), p + "mlp.up_proj.weight": (ff, hid),
                           p + "mlp.down_proj.weight": (hid, ff)})
    return shapes
