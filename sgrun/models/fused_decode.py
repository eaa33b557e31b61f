"""The CPU decode forward with its blocks between attention calls in C++ (cpu_kernels/decode_block.cpp).

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


def supports(model: LlamaModel) -> bool:
    """Whether every layer linear of `model` runs on the C++ tiles of one build that has the blocks,
    on one CPU process (the blocks call the tiles of the level the linears were built at)."""
    if (model.device.type != "cpu" or model.all_reduce is not None or model.residual_dtype != torch.float32
            or model.dtype not in (torch.bfloat16, torch.float32)):
        return False
    linears = [lin for lw in model.layers for lin in (lw.qkv, lw.o, lw.gate_up, lw.down)]
    if any(_linear_parts(lin, model.dtype) is None for lin in linears):
        return False
    modules = {id(lin.ops.module) for lin in linears}
    return len(modules) == 1 and hasattr(linears[0].ops.module, "decode_block_new")


class FusedDecode:
    """The model's decode forward over C++ blocks; same inputs and outputs as LlamaModel.forward."""

    ready = True        # nothing to compile

    def __init__(self, model: LlamaModel):
        self.model = model
        self.module = model.layers[0].qkv.ops.module
        cfg, dt = model.cfg, model.dtype
        layers = model.layers
        heads = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)

        def block(tail, mlp_norm, next_norm, qkv) -> int:
            parts = [_linear_parts(l, dt) if l is not None else _NO_LINEAR for l in (*tail, qkv)]
            kinds, a, b, ns, biases = (list(x) for x in zip(*parts))
            # Unused slots still need tensors for the binding; the block never reads them.
            a = [t if t is not None else next_norm for t in a]
            b = [t if t is not None else next_norm for t in b]
            return self.module.decode_block_new(kinds, a, b, ns, biases, mlp_norm, next_norm, *heads, cfg.rms_eps,
                                                dt == torch.bfloat16)

        none3 = (None, None, None)
        self.first = block(none3, None, layers[0].attn_norm, layers[0].qkv)
        self.inner = [block((lw.o, lw.gate_up, lw.down), lw.mlp_norm, nxt.attn_norm, nxt.qkv)
                      for lw, nxt in zip(layers[:-1], layers[1:])]
        last = layers[-1]
        self.last = block((last.o, last.gate_up, last.down), last.mlp_norm, model.final_norm, None)
        # decode_logits' tables (the int8 embedding and lm_head: Int8Linear on the C++ tiles, float32
        # activations, the default int4 model's; the cos / sin tables), bound once in C++ as the
        # blocks are; None where another kind serves either (FusedDecode.forward then runs them in
        # Python around decode_forward).
        embed, head = model.embed_table, model.lm_head
        self.token_tables = (self.module.decode_tables_new(embed.blocked, embed.blocked_scale, model.cos, model.sin,
                                                           head.blocked, head.blocked_scale)
                             if all(isinstance(t, Int8Linear) and t.cpp and t.bias is None for t in (embed, head))
                             and hasattr(self.module, "decode_logits") else None)
        # Int8Linear's tiles take any row count; past the others' limits dense GEMMs win (quant_linear.py).
        self.max_rows = min(getattr(lin, "max_rows", KERNEL_MAX_ROWS) for lw in layers
                            for lin in (lw.qkv, lw.o, lw.gate_up, lw.down))
        self.ids = [self.first, *self.inner, self.last]
        # Every byte a step streams, onto 2 MB pages (huge_pages.py): in place, so the bound
        # tensors stay as they are.
        streamed = [t for lw in layers for lin in (lw.qkv, lw.o, lw.gate_up, lw.down)
                    for t in _linear_parts(lin, dt)[1:3]]
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
            return self.module.decode_logits(self.ids, self.token_tables, input_ids, positions, *args)
        cos, sin = m.cos[positions], m.sin[positions]
        h = m.embed[input_ids] if m.embed_table is None else m.embed_table.rows(input_ids)
        h = h.to(torch.float32).contiguous()
        if args is not None:   # an all-decode batch: every layer, attention included, in one C++ call
            x = self.module.decode_forward(self.ids, h, cos, sin, *args)
            return m.lm_head(x[logit_rows]).float()
        h, q, k, v = run(self.first, h, None, cos, sin)
        # q, k, v are column views of one projection; a backend that reads strided rows takes them as they are.
        same = getattr(attn, "takes_strided_qkv", False)
        for li, block in enumerate(self.inner):
            if not same:
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            h, q, k, v = run(block, h, attn.forward(li, q, k, v), cos, sin)
        _, x = run(self.last, h, attn.forward(len(self.inner), q, k, v), None, None)
        return m.lm_head(x[logit_rows]).float()


_FUSED: "weakref.WeakKeyDictionary[LlamaModel, FusedDecode]" = weakref.WeakKeyDictionary()


def fused_decode_for(model: LlamaModel) -> FusedDecode | None:
    """One FusedDecode per model object (engines sharing a cached model share it), or None where
    the model's linears do not all run on the C++ tiles."""
    if model not in _FUSED:
        if not supports(model):
            return None
        _FUSED[model] = FusedDecode(model)
    return _FUSED[model]
