"""Small random-weight models of the model family's layer options, built on LlamaModel with each
option's fields set as the family's model classes set them (config fields and per-layer weights:
q/k norms, sandwich norms, GELU-tanh, the embedding scale, partial rotary dims, per-layer RoPE tables
and NoPE layers, sliding windows, routed experts), and a float64 reference forward over their
dequantized weights. The fast path's tests (test_fused_archs.py) drive FusedDecode and
CppPagedAttention with them; the reference is independent of both."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from sgrun.engine.parts.attention.cpp_backend import CppPagedAttention
from sgrun.engine.state.page_pool import PagePool
from sgrun.models.config import ModelConfig
from sgrun.models.llama import LlamaModel
from sgrun.models.quant_linear import make_linear
from sgrun.models.random_model import random_weights
from paged_batch import segments_over_tables

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, LAYERS, VOCAB = 64, 4, 2, 32, 128, 4, 256

# Each architecture's options (the model family's ModelConfig fields and per-layer choices).
ARCHS = {
    "qwen3": dict(qk_norm="head"),
    "gemma3": dict(qk_norm="head", hidden_act="gelu_tanh", sandwich_norm=True, embed_scale=math.sqrt(HIDDEN),
                   attn_scale=24 ** -0.5, layer_windows=[5, 5, 5, None], layer_rope=[0, 0, 0, 1]),
    "phi3": dict(rotary_dim=16),
    "smollm3": dict(layer_rope=[0, 0, None, 0]),
    "qwen3moe": dict(qk_norm="head", num_experts=8, experts_per_token=2, norm_topk_prob=True),
    "olmoe": dict(qk_norm="full", num_experts=8, experts_per_token=3, norm_topk_prob=False,
                  moe_layers=[True, False, True, True]),
}


def _norm_weight(n: int, g: torch.Generator) -> torch.Tensor:
    return (1.0 + 0.3 * torch.randn(n, generator=g)).float()


def build(arch: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> LlamaModel:
    """A LlamaModel (int4 layer linears, int8 embedding and lm_head) carrying `arch`'s options."""
    opts = ARCHS[arch]
    cfg = ModelConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_layers=LAYERS,
                      num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, max_position=512,
                      rms_eps=1e-6, tie_embeddings=True)
    weights = random_weights(cfg, seed=seed, std=0.12)
    model = LlamaModel(cfg, weights, dtype, "int4")
    g = torch.Generator().manual_seed(seed + 1)
    cfg.arch = arch
    cfg.hidden_act = opts.get("hidden_act", "silu")
    cfg.qk_norm = opts.get("qk_norm")
    cfg.sandwich_norm = opts.get("sandwich_norm", False)
    cfg.embed_scale = opts.get("embed_scale", 1.0)
    cfg.attn_scale = opts.get("attn_scale")
    cfg.rotary_dim = opts.get("rotary_dim")
    cfg.layer_windows = opts.get("layer_windows", [None] * LAYERS)
    cfg.num_experts = opts.get("num_experts", 0)
    rotary = cfg.rotary_dim or HEAD_DIM
    tables = []
    for theta in (10000.0, 1000000.0):
        inv = 1.0 / (theta ** (torch.arange(0, rotary, 2, dtype=torch.float64) / rotary))
        freqs = torch.outer(torch.arange(cfg.max_position, dtype=torch.float64), inv).float()
        emb = torch.cat([freqs, freqs], dim=-1)
        tables.append((emb.cos().to(dtype), emb.sin().to(dtype)))
    model.rope_tables = tables
    model.cos, model.sin = tables[0]
    layer_rope = opts.get("layer_rope", [0] * LAYERS)
    moe_layers = opts.get("moe_layers", [True] * LAYERS) if cfg.num_experts else [False] * LAYERS
    for i, lw in enumerate(model.layers):
        lw.rope = layer_rope[i]
        lw.window = cfg.layer_windows[i]
        lw.q_norm = lw.k_norm = lw.post_attn_norm = lw.post_mlp_norm = lw.moe = None
        if cfg.qk_norm == "head":
            lw.q_norm, lw.k_norm = _norm_weight(HEAD_DIM, g), _norm_weight(HEAD_DIM, g)
        elif cfg.qk_norm == "full":
            lw.q_norm, lw.k_norm = _norm_weight(HEADS * HEAD_DIM, g), _norm_weight(KV_HEADS * HEAD_DIM, g)
        if cfg.sandwich_norm:
            lw.post_attn_norm, lw.post_mlp_norm = _norm_weight(HIDDEN, g), _norm_weight(HIDDEN, g)
        if moe_layers[i]:
            E, inter = cfg.num_experts, 32
            lw.moe = SimpleNamespace(
                router=(torch.randn(E, HIDDEN, generator=g) * 0.3).float(),
                gate_up=[make_linear(torch.randn(2 * inter, HIDDEN, generator=g) * 0.12, None, "int4", dtype)
                         for _ in range(E)],
                down=[make_linear(torch.randn(HIDDEN, inter, generator=g) * 0.12, None, "int4", dtype)
                      for _ in range(E)],
                top_k=opts["experts_per_token"], norm_topk_prob=opts["norm_topk_prob"])
            lw.gate_up = lw.down = None
    return model


def attention_scale(model) -> float:
    return model.cfg.attn_scale or model.cfg.head_dim ** -0.5


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def _w(lin) -> torch.Tensor:
    return lin.dequantized().double()


def reference_logits(model, tokens: list[int], windows: list[int | None] | None = None) -> torch.Tensor:
    """The forward of one sequence in float64 over the dequantized weights: [T, vocab] logits.
    `windows` overrides the layers' (to show what ignoring them would change)."""
    cfg = model.cfg
    H, KV, D, eps = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rms_eps
    T = len(tokens)
    ids = torch.tensor(tokens)
    h = model.embed_table.rows(ids).double() * float(torch.tensor(cfg.embed_scale, dtype=torch.float32))
    act = (lambda x: torch.nn.functional.gelu(x, approximate="tanh")) if cfg.hidden_act == "gelu_tanh" else \
        torch.nn.functional.silu
    R = cfg.rotary_dim or D
    pos = torch.arange(T)
    for i, lw in enumerate(model.layers):
        x = _rms(h, lw.attn_norm, eps)
        q, k, v = (x @ _w(lw.qkv).T).split([H * D, KV * D, KV * D], dim=-1)
        if cfg.qk_norm == "head":
            q = _rms(q.view(T, H, D), lw.q_norm, eps).reshape(T, -1)
            k = _rms(k.view(T, KV, D), lw.k_norm, eps).reshape(T, -1)
        elif cfg.qk_norm == "full":
            q, k = _rms(q, lw.q_norm, eps), _rms(k, lw.k_norm, eps)
        q, k, v = q.view(T, H, D), k.view(T, KV, D), v.view(T, KV, D)
        if lw.rope is not None:
            cos, sin = (t[pos].double().unsqueeze(1) for t in model.rope_tables[lw.rope])

            def rope(x):
                r, rest = x[..., :R], x[..., R:]
                half = R // 2
                rot = torch.cat([-r[..., half:], r[..., :half]], dim=-1)
                return torch.cat([r * cos + rot * sin, rest], dim=-1)
            q, k = rope(q), rope(k)
        window = (windows if windows is not None else cfg.layer_windows)[i]
        j = torch.arange(T)
        allowed = j[None, :] <= j[:, None]
        if window is not None:
            allowed &= j[None, :] > j[:, None] - window
        kk = k.repeat_interleave(H // KV, dim=1)
        vv = v.repeat_interleave(H // KV, dim=1)
        scores = torch.einsum("thd,shd->hts", q, kk) * attention_scale(model)
        scores = scores.masked_fill(~allowed, float("-inf"))
        o = torch.einsum("hts,shd->thd", scores.softmax(-1), vv).reshape(T, -1)
        o = o @ _w(lw.o).T
        h = h + (_rms(o, lw.post_attn_norm, eps) if lw.post_attn_norm is not None else o)
        x = _rms(h, lw.mlp_norm, eps)
        if lw.moe is not None:
            probs = (x @ lw.moe.router.double().T).softmax(-1)
            top_w, top_i = probs.topk(lw.moe.top_k, dim=-1)
            if lw.moe.norm_topk_prob:
                top_w = top_w / top_w.sum(-1, keepdim=True)
            mlp = torch.zeros_like(h)
            for t in range(T):
                for wt, e in zip(top_w[t], top_i[t].tolist()):
                    gate, up = (x[t] @ _w(lw.moe.gate_up[e]).T).chunk(2)
                    mlp[t] += wt * ((act(gate) * up) @ _w(lw.moe.down[e]).T)
        else:
            gate, up = (x @ _w(lw.gate_up).T).chunk(2, dim=-1)
            mlp = (act(gate) * up) @ _w(lw.down).T
        h = h + (_rms(mlp, lw.post_mlp_norm, eps) if lw.post_mlp_norm is not None else mlp)
    return _rms(h, model.final_norm, eps) @ _w(model.lm_head).T


class Sequences:
    """Sequences decoding over one pool through CppPagedAttention, each with its own pages."""

    def __init__(self, model, lengths: list[int], op, prefill_op=None, page_size: int = 4):
        cfg = model.cfg
        self.model, self.op, self.prefill_op, self.ps = model, op, prefill_op, page_size
        self.tables, first = [], 0
        for n in lengths:
            pages = -(-n // page_size)
            self.tables.append(list(range(first, first + pages)))
            first += pages
        self.pool = PagePool(cfg.num_layers, first, page_size, cfg.num_kv_heads, cfg.head_dim, model.dtype)
        self.done = [0] * len(lengths)   # tokens each sequence has in the pool

    def attention(self, specs: list[tuple[int, int]], seqs: list[int]) -> CppPagedAttention:
        cfg = self.model.cfg
        attn = CppPagedAttention(self.pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, self.op,
                                 prefill_op=self.prefill_op)
        attn.configure(self.model.attn_scale, list(self.model.layer_windows))
        segments, wp, wo, _ = segments_over_tables(specs, [self.tables[s] for s in seqs], self.ps)
        attn.prepare(wp, wo, segments)
        return attn

    def step(self, fused, chunks: dict[int, list[int]], one_call: bool = True) -> dict[int, torch.Tensor]:
        """Runs one batch: sequence s's next tokens chunks[s] (several: a prefill chunk). Returns
        each sequence's logits for its chunk's last token."""
        seqs = sorted(chunks)
        specs = [(len(chunks[s]), self.done[s] + len(chunks[s])) for s in seqs]
        attn = self.attention(specs, seqs)
        if not one_call:
            attn.decode_forward_args = lambda dt: None
        ids = torch.tensor([t for s in seqs for t in chunks[s]])
        positions = torch.tensor([self.done[s] + i for s in seqs for i in range(len(chunks[s]))])
        ends = torch.tensor(list(torch.tensor([q for q, _ in specs]).cumsum(0) - 1))
        logits = fused.forward(ids, positions, attn, torch.arange(len(ids)))
        for s in seqs:
            self.done[s] += len(chunks[s])
        return {s: logits[int(e)] for s, e in zip(seqs, ends)}
