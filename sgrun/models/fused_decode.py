"""The CPU decode forward with its blocks between attention calls in C++ (kernels/cpu/decode_block.cpp).

LlamaModel.forward's twin for batches of at most `max_rows` tokens, as compiled_forward.py's, but
with no torch.compile: each block (o projection + residual, MLP, the next layer's norm, q/k/v and
RoPE) is one call into the matmul kernel's module with its weights bound once at construction.
A batch-1 step's 31 block calls cost ~0.3 ms where the compiled graphs' wrappers and guards cost
~4.5 ms, and nothing needs warming up, so an engine serves at full speed from its first token
(measured 2 December 2026, 2d541c2). A batch of decodes alone (no prefill chunk, no cascade prefix: what
CppPagedAttention.decode_forward_args accepts) goes further: its every layer, attention included,
is one call (decode_block.cpp's decode_forward, the attention reached by its address in the
paged-decode module): bitwise the per-layer loop, with the GIL released for the whole forward.
Its speed-up measured within the noise on an AVX2-only Zen 3 (1.00-1.03x, docs/cpu_kernels.md).
Other batches call the attention backend from Python between the blocks.

It serves a model whose every layer linear runs on sgrun's C++ tiles (int4, dense bf16, or int8 with
float32 activations), with a float32 residual stream, on one process (no tensor parallelism);
`fused_decode_for` returns None otherwise and the compiled or eager forward serves.

Every architecture of the model family goes through the same blocks, its options bound per block
(decode_block_configure): the MLP's activation (SiLU or GELU-tanh), sandwich norms (Gemma 3),
q/k RMSNorm per head (Qwen3, Gemma 3) or over all heads (OLMoE), partial rotary dims, each layer's
RoPE table or none (SmolLM3's NoPE layers), the embedding scale (Gemma); and an MoE layer's routed
experts (decode_block_moe: routing in the block, rows grouped per expert, each expert's packed
weights read once a step and only where a row chose it). The per-layer sliding windows are the
attention backend's (CppPagedAttention.configure), passed to the one-call forward with its arguments.
"""

from __future__ import annotations

import weakref

import torch

from sgrun.models.huge_pages import back_with_huge_pages
from sgrun.models.llama import LlamaModel
from sgrun.models.quant_linear import KERNEL_MAX_ROWS, DenseLinear, Int4Linear, Int8Linear

_NO_LINEAR = (-1, None, None, 0, None)


def _linear_parts(lin, dtype: torch.dtype):
    """(kind, a, b, n, bias) of a linear the C++ block calls, or None where it has no C++ tiles."""
    if isinstance(lin, Int4Linear) and lin.cpp:
        return 0, lin.codes, lin.group_scales, lin.out_features, lin.bias
    if isinstance(lin, DenseLinear) and lin.cpp and dtype == torch.bfloat16:
        return 1, lin.packed, lin.packed, lin.out_features, lin.bias
    if isinstance(lin, Int8Linear) and lin.cpp and dtype == torch.float32:
        return 2, lin.blocked, lin.blocked_scale, lin.out_features, lin.bias
    return None


# The architectures of the model family (models/arch/) the blocks serve beyond llama-shaped models
# (engine_builder.py asks): each layer option they use is one of the blocks'.
FAMILY_ARCHS = ("llama", "mistral", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3", "smollm3", "olmoe", "mixtral")

_ACTS = {"silu": 0, "gelu_tanh": 1}
_QK_NORMS = {None: 0, "head": 1, "full": 2}


def _moe(lw):
    """A layer's MoEWeights, or None (a dense MLP; models without the field)."""
    return getattr(lw, "moe", None)


def _layer_linears(lw) -> list:
    """Every linear of a layer the blocks call: q/k/v, o, and the MLP's (the experts' on an MoE layer)."""
    moe = _moe(lw)
    mlp = [*moe.gate_up, *moe.down] if moe is not None else [lw.gate_up, lw.down]
    return [lw.qkv, lw.o, *mlp]


def _rope_tables(model) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The model's (cos, sin) tables by index (a layer's `rope` names one); one where the model has
    a single table."""
    tables = getattr(model, "rope_tables", None)
    return list(tables) if tables else [(model.cos, model.sin)]


def supports(model: LlamaModel) -> bool:
    """Whether every layer linear of `model` runs on the C++ tiles of one build that has the blocks,
    on one CPU process (the blocks call the tiles of the level the linears were built at), and the
    build has every option the model's layers need."""
    if (model.device.type != "cpu" or model.all_reduce is not None or model.residual_dtype != torch.float32
            or model.dtype not in (torch.bfloat16, torch.float32)):
        return False
    if getattr(model.cfg, "hidden_act", "silu") not in _ACTS or getattr(model.cfg, "qk_norm", None) not in _QK_NORMS:
        return False
    linears = [lin for lw in model.layers for lin in _layer_linears(lw)]
    if any(_linear_parts(lin, model.dtype) is None for lin in linears):
        return False
    if any(_moe(lw) is not None and any(lin.bias is not None for lin in _layer_linears(lw)[2:]) for lw in model.layers):
        return False   # the experts' linears are bound without biases
    modules = {id(lin.ops.module) for lin in linears}
    module = linears[0].ops.module
    return len(modules) == 1 and hasattr(module, "decode_block_new") and hasattr(module, "decode_block_configure")


class FusedDecode:
    """The model's decode forward over C++ blocks; same inputs and outputs as LlamaModel.forward."""

    ready = True        # nothing to compile

    def __init__(self, model: LlamaModel):
        self.model = model
        self.module = model.layers[0].qkv.ops.module
        cfg, dt = model.cfg, model.dtype
        layers = model.layers
        heads = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
        act = _ACTS[getattr(cfg, "hidden_act", "silu")]
        qk_mode = _QK_NORMS[getattr(cfg, "qk_norm", None)]
        rotary_dim = getattr(cfg, "rotary_dim", None) or 0
        # Gemma multiplies the embedding rows by sqrt(hidden) rounded to the GEMM dtype (as transformers
        # and decoder.py's embed_rows do), float32 by float32, here and in decode_logits.
        self._embed_mul = torch.tensor(float(getattr(cfg, "embed_scale", 1.0) or 1.0), dtype=dt).float()
        self.embed_scale = float(self._embed_mul)
        self.softcap = getattr(cfg, "final_logit_softcap", None)

        def block(tail_layer, next_norm, next_layer) -> int:
            """tail_layer's o projection and MLP (None: the first block), the next norm, next_layer's
            q/k/v (None: the last block)."""
            moe = _moe(tail_layer) if tail_layer is not None else None
            tail = ((None, None, None) if tail_layer is None
                    else (tail_layer.o, None, None) if moe is not None
                    else (tail_layer.o, tail_layer.gate_up, tail_layer.down))
            qkv = next_layer.qkv if next_layer is not None else None
            parts = [_linear_parts(l, dt) if l is not None else _NO_LINEAR for l in (*tail, qkv)]
            kinds, a, b, ns, biases = (list(x) for x in zip(*parts))
            # Unused slots still need tensors for the binding; the block never reads them.
            a = [t if t is not None else next_norm for t in a]
            b = [t if t is not None else next_norm for t in b]
            mlp_norm = tail_layer.mlp_norm if tail_layer is not None else None
            bid = self.module.decode_block_new(kinds, a, b, ns, biases, mlp_norm, next_norm, *heads, cfg.rms_eps,
                                               dt == torch.bfloat16)
            rope = getattr(next_layer, "rope", 0) if next_layer is not None else 0

            def f32(layer, name):   # a norm weight as the block binds it (float32), or None
                t = getattr(layer, name, None) if layer is not None else None
                return None if t is None else t.float().contiguous()
            self.module.decode_block_configure(
                bid, act, f32(tail_layer, "post_attn_norm"), f32(tail_layer, "post_mlp_norm"),
                qk_mode if next_layer is not None else 0, f32(next_layer, "q_norm"), f32(next_layer, "k_norm"),
                rotary_dim, -1 if rope is None else int(rope))
            if moe is not None:
                experts = [_linear_parts(lin, dt) for lin in (*moe.gate_up, *moe.down)]
                ekinds, ea, eb, ens, _ = (list(x) for x in zip(*experts))
                self.module.decode_block_moe(bid, moe.router.float().contiguous(), ekinds, ea, eb, ens, int(moe.top_k),
                                             bool(moe.norm_topk_prob))
            return bid

        self.first = block(None, layers[0].attn_norm, layers[0])
        self.inner = [block(lw, nxt.attn_norm, nxt) for lw, nxt in zip(layers[:-1], layers[1:])]
        self.last = block(layers[-1], model.final_norm, None)
        # Which rope table each layer's q and k take (None: no RoPE), for the per-layer loop.
        self.layer_rope = [getattr(lw, "rope", 0) for lw in layers]
        # decode_logits' tables (the int8 embedding and lm_head: Int8Linear on the C++ tiles, float32
        # activations, the default int4 model's; the cos / sin tables), bound once in C++ as the
        # blocks are; None where another kind serves either (FusedDecode.forward then runs them in
        # Python around decode_forward).
        embed, head = model.embed_table, model.lm_head
        tables = _rope_tables(model)
        self.token_tables = (self.module.decode_tables_new(embed.blocked, embed.blocked_scale, [c for c, _ in tables],
                                                           [s for _, s in tables], head.blocked, head.blocked_scale,
                                                           self.embed_scale)
                             if all(isinstance(t, Int8Linear) and t.cpp and t.bias is None for t in (embed, head))
                             and hasattr(self.module, "decode_logits") else None)
        # Int8Linear's tiles take any row count; past the others' limits dense GEMMs win (quant_linear.py).
        self.max_rows = min(getattr(lin, "max_rows", KERNEL_MAX_ROWS) for lw in layers for lin in _layer_linears(lw))
        self.ids = [self.first, *self.inner, self.last]
        # Every byte a step streams, onto 2 MB pages (huge_pages.py): in place, so the bound
        # tensors stay as they are.
        streamed = [t for lw in layers for lin in _layer_linears(lw) for t in _linear_parts(lin, dt)[1:3]]
        if self.token_tables is not None:
            streamed += [embed.blocked, embed.blocked_scale, head.blocked, head.blocked_scale]
        self.huge_pages = back_with_huge_pages(streamed)
        tables = [self.token_tables] if self.token_tables is not None else []
        weakref.finalize(self, self.module.decode_block_free, list(self.ids) + tables)

    def eligible(self, num_tokens: int) -> bool:
        return num_tokens <= self.max_rows

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn, logit_rows: torch.Tensor) -> torch.Tensor:
        m, run = self.model, self.module.decode_block_run
        one_call = getattr(attn, "decode_forward_args", None)
        args = one_call(m.dtype) if one_call is not None else None
        # An all-decode batch whose every row wants logits (rows ascending, so all of them in order):
        # tokens to logits in one C++ call.
        if args is not None and self.token_tables is not None and logit_rows.shape[0] == input_ids.shape[0]:
            return self._capped(self.module.decode_logits(self.ids, self.token_tables, input_ids, positions, *args))
        tables = [(c[positions], s[positions]) for c, s in _rope_tables(m)]
        h = m.embed[input_ids] if m.embed_table is None else m.embed_table.rows(input_ids)
        h = h.to(torch.float32).contiguous()
        if self.embed_scale != 1.0:
            h = h * self._embed_mul
        if args is not None:   # an all-decode batch: every layer, attention included, in one C++ call
            x = self.module.decode_forward(self.ids, h, [c for c, _ in tables], [s for _, s in tables], *args)
            return self._capped(m.lm_head(x[logit_rows]).float())
        none = (None, None)

        def rope_of(layer: int):   # the cos / sin rows layer's q and k take
            index = self.layer_rope[layer]
            return none if index is None else tables[index]

        h, q, k, v = run(self.first, h, None, *rope_of(0))
        # q, k, v are column views of one projection; a backend that reads strided rows takes them as they are.
        same = getattr(attn, "takes_strided_qkv", False)
        for li, block in enumerate(self.inner):
            if not same:
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            h, q, k, v = run(block, h, attn.forward(li, q, k, v), *rope_of(li + 1))
        _, x = run(self.last, h, attn.forward(len(self.inner), q, k, v), None, None)
        return self._capped(m.lm_head(x[logit_rows]).float())

    def _capped(self, logits: torch.Tensor) -> torch.Tensor:
        """The final logit soft-cap where the model has one (cap * tanh(logits / cap)), as decoder.py's."""
        if self.softcap:
            return torch.tanh(logits / self.softcap) * self.softcap
        return logits


_FUSED: "weakref.WeakKeyDictionary[LlamaModel, FusedDecode]" = weakref.WeakKeyDictionary()


def fused_decode_for(model: LlamaModel) -> FusedDecode | None:
    """One FusedDecode per model object (engines sharing a cached model share it), or None where
    the model's linears do not all run on the C++ tiles."""
    if model not in _FUSED:
        if not supports(model):
            return None
        _FUSED[model] = FusedDecode(model)
    return _FUSED[model]
