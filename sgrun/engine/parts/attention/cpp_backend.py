"""The CPU attention backend whose decodes read the KV pages in place (kernels/cpu/paged_decode.py),
with cascade attention over prefixes that several decoding requests share (cascade.py).

The KV writes and everything else are TorchPagedAttention's (attention/torch_backend.py); the
single-token segments change: one kernel call per layer covers every decode of the batch
through its page table, with no gather, no padding and no mask. A decode row's result depends on
its own query and context alone (not on the batch, the thread count or a cascade), so the rows
of a speculative verify step get exactly what plain decodes at their positions would. With
`prefill_op` (bf16 and float32 pools at every x86 level with AVX2, kernels/cpu/prefill_attention.py)
the prefill chunks likewise take one C++ call per layer that reads their context from the pages;
without it (no vector path at the level, another dtype or head dim) they go through SDPA.

Sliding windows (`configure(scale, windows)`: Gemma 3's local layers): a windowed layer's decode
rows attend the last `window` tokens of their context in the same kernel (its chunks start at the
window's edge), and its prefill chunks the keys p - window < j <= p in the C++ prefill kernel,
on the same vector and tile paths as a global layer (`window` bounds their walk from below, so a
local layer's cost follows its window, not the prompt); a model with any window attends no cascade prefix (its
shared prefix is not what a windowed row reads). Each row's result still depends only on its own
query and context, so batch invariance holds for windowed layers too.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch.nn.utils.rnn import pad_sequence

from sgrun.kernels.cpu.pool_dtypes import pool_dtypes_under
from sgrun.kernels.cpu.prefill_attention import BF16_FROM_DEFAULT, use_amx
from sgrun.engine.parts.attention.backend import Segment
from sgrun.engine.parts.attention.torch_backend import TorchPagedAttention
from sgrun.engine.parts.attention.cascade import MIN_SAVED_PAGES, SharedPrefix, find_shared_prefixes
from sgrun.engine.state.page_pool import PagePool


class CppPagedAttention(TorchPagedAttention):
    applies_windows = True   # its decode and prefill kernels apply configure()'s windows (the module's docstring)

    def __init__(self, pool: PagePool, num_heads: int, num_kv_heads: int, head_dim: int, op: ModuleType,
                 cascade: bool = True, prefill_op: ModuleType | None = None,
                 prefill_bf16_from: int = BF16_FROM_DEFAULT):
        super().__init__(pool, num_heads, num_kv_heads, head_dim)
        self.op = op
        self.prefill_op = prefill_op   # None: prefill chunks go through SDPA (TorchPagedAttention)
        # A float32 pool's prefill rows from this position on take bf16 products where the kernel
        # has the AVX512-BF16 path (kernels/cpu/prefill_attention.py: why, and SGRUN_PREFILL_BF16_FROM).
        self.prefill_bf16_from = prefill_bf16_from
        self.prefill_amx = use_amx(prefill_op)   # that path's products on AMX tiles (the amx level)
        self.cascade = cascade   # read each step, so it can be switched on a live engine
        self.min_saved_pages = MIN_SAVED_PAGES
        self.cascade_steps = 0   # prepared batches that attended at least one shared prefix once
        self.decode_rows: torch.Tensor | None = None
        self.o: torch.Tensor | None = None     # the decode kernel's outputs (_prepare_decodes)
        self.lse: torch.Tensor | None = None
        self.prefixes: list[SharedPrefix] = []
        # The kernel's decode_layer for FusedDecode's one-call forward (0: an op without it).
        self.decode_layer_fn = op.decode_layer_address() if hasattr(op, "decode_layer_address") else 0
        self.windows: list[int | None] = [None] * len(pool.k)   # per layer; None: global
        self._window_args: list[int] = []                      # decode_forward's: [] while all are global

    def configure(self, scale: float, windows: list[int | None]) -> None:
        """The attention scale and each layer's sliding window (None: global): a query at position p
        attends keys j with p - window < j <= p."""
        windows = list(windows)
        if len(windows) != len(self.pool.k):
            raise ValueError(f"windows: one per layer ({len(self.pool.k)}), got {len(windows)}")
        if any(w is not None and (not isinstance(w, int) or w <= 0) for w in windows):
            raise ValueError(f"windows: positive token counts or None, got {windows}")
        if any(w is not None for w in windows):
            if not hasattr(self.op, "paged_decode_window"):
                raise ValueError("this build of the C++ decode kernel has no sliding windows")
        parent = getattr(super(), "configure", None)
        if parent is not None:   # the torch path (prefills without the C++ kernel) applies them too
            parent(scale, windows)
        elif self.prefill_op is None and any(w is not None for w in windows):
            raise ValueError("sliding windows need the C++ prefill kernel here (its SDPA fallback attends globally)")
        self.scale = float(scale)
        self.windows = windows
        self._window_args = [w or 0 for w in windows] if any(w is not None for w in windows) else []

    def prefill_kernel(self, query_dtype: torch.dtype) -> str:
        """The prefill attention this backend runs, for the start-up report: SDPA, or sgrun's C++
        kernel with its vector path for the pool (and, for float32 queries on the AVX512-BF16
        path, where their bf16 products start)."""
        if self.prefill_op is None:
            return "SDPA"
        from sgrun.kernels.cpu.prefill_attention import dtype_name
        path = self.prefill_op.fast_path(dtype_name(self.pool.k[0].dtype), self.D) or "portable"
        if path == "avx512_bf16" and self.prefill_amx:
            path = "amx"   # the same walk, its products on AMX tiles
        if path in ("avx512_bf16", "amx") and query_dtype == torch.float32:
            return f"sgrun C++ {path} (bf16 products from position {self.prefill_bf16_from})"
        return f"sgrun C++ {path}"

    def _prepare_decodes(self, decodes: list[Segment]) -> None:
        self.prefixes = []
        if not decodes:
            self.decode_rows = None
            return
        ps = self.pool.page_size
        q_starts = [s.q_start for s in decodes]
        self.decode_rows = torch.tensor(q_starts, dtype=torch.long)
        n = len(decodes)
        # All-decode batches are rows 0..B-1 in order: slice, don't index. (Read off the list, and
        # one sequence's table taken as it is: at batch 1 this runs on caches the forward has just
        # flushed, where every torch op costs 10-90 us.)
        self.rows_are_prefix = q_starts[-1] == n - 1
        self.table = (decodes[0].pages.long().view(1, -1) if n == 1
                      else pad_sequence([s.pages.long() for s in decodes], batch_first=True).contiguous())
        lens = [s.ctx_len for s in decodes]
        self.lens = torch.tensor(lens, dtype=torch.long)
        starts = [0] * n   # tokens a cascade prefix covers, per row
        if self.cascade and not self._window_args:   # a windowed row reads no shared prefix
            # Prefixes end on the kernel's chunk boundaries: a member's result is then bitwise
            # what it would be without the cascade (paged_decode.cpp).
            self.prefixes = find_shared_prefixes(self.table, lens, ps, self.min_saved_pages, self.op.chunk_tokens())
        for p in self.prefixes:
            for i in p.members.tolist():
                starts[i] = p.tokens
        if self.prefixes:
            self.cascade_steps += 1
        self.starts = torch.tensor(starts, dtype=torch.long)
        # Kernel outputs, reused by every layer of the step (each layer's is copied out at once),
        # and by the next steps of as many rows (every call writes all of them).
        if self.o is None or self.o.shape[0] != n:
            self.o = torch.empty(n, self.H * self.D, dtype=torch.float32)
            self.lse = torch.empty(n, self.H, dtype=torch.float32)

    # q, k and v may be strided views (the narrowed columns of a fused q/k/v projection): the
    # KV write and the kernels read rows of contiguous heads, so FusedDecode skips the copies.
    takes_strided_qkv = True

    def _write_kv(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Row copies in C++: the two index assignments cost more than the decode kernel at batch 1."""
        k_cache, v_cache = self.pool.k[layer], self.pool.v[layer]
        if (k_cache.dtype in pool_dtypes_under(k.dtype) and v.dtype == k.dtype and k.stride(2) == 1
                and v.stride(2) == 1):
            self.op.write_kv(k, v, k_cache, v_cache, self.write_pages, self.write_offsets)
        else:
            super()._write_kv(layer, k, v)

    def _attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """An all-decode batch's output is converted straight from the kernel's float32 rows (no
        empty + indexed copy): per layer at batch 1, 2 calls where there were ~7 torch ops."""
        if (not self.prefills and self.decode_rows is not None and self.rows_are_prefix
                and self.decode_rows.shape[0] == q.shape[0]):
            self._run_decode_kernel(layer, q)
            return self.o.view(q.shape).to(q.dtype, copy=True)   # a copy: the next layer overwrites self.o
        return super()._attend(layer, q, k, v)

    def decode_forward_args(self, dtype: torch.dtype) -> tuple | None:
        """The arguments after cos / sin of the matmul module's decode_forward (decode_block.cpp),
        which runs this batch's every layer, attention included, in one C++ call: where the batch
        is decodes alone in row order with no shared prefix to cascade and the pool holds `dtype`
        (the GEMM's: the KV write copies rows as they are), or bf16 or float16 under float32 (the
        write rounds them). None otherwise: FusedDecode then calls
        forward() per layer. The attention is this module's own kernel, reached by its address,
        so a row gets bitwise what forward() gives it."""
        if (self.prefills or self.decode_rows is None or not self.rows_are_prefix or self.prefixes
                or self.pool.k[0].dtype not in pool_dtypes_under(dtype) or not self.decode_layer_fn):
            return None
        return (self.decode_layer_fn, self.pool.k, self.pool.v, self.write_pages, self.write_offsets,
                self.table, self.lens, self.starts, self.scale, self.o, self.lse, self._window_args)

    def _run_decode_kernel(self, layer: int, q: torch.Tensor) -> None:
        """The decode rows' attention into self.o / self.lse (float32)."""
        n = self.decode_rows.shape[0]
        qd = q[:n] if self.rows_are_prefix else q[self.decode_rows]   # read in place when a prefix of rows
        if qd.stride(2) != 1 or qd.stride(1) != self.D:   # the kernel reads rows of contiguous [H, D]
            qd = qd.contiguous()
        k_cache, v_cache = self.pool.k[layer], self.pool.v[layer]
        o, lse = self.o, self.lse
        for p in self.prefixes:   # each member's state after the shared prefix, then its own tokens onto it
            self.op.cascade_prefix(qd, k_cache, v_cache, p.pages, p.tokens, p.members, self.scale, o, lse)
        window = self.windows[layer]
        if window is not None:
            self.op.paged_decode_window(qd, k_cache, v_cache, self.table, self.lens, self.starts, self.scale, o, lse,
                                        window)
        else:
            self.op.paged_decode(qd, k_cache, v_cache, self.table, self.lens, self.starts, self.scale, o, lse)

    def _attend_decodes(self, layer: int, q: torch.Tensor, out: torch.Tensor) -> None:
        if self.decode_rows is None:
            return
        n = self.decode_rows.shape[0]
        self._run_decode_kernel(layer, q)
        o = self.o
        if self.rows_are_prefix:
            out[:n] = o.view(n, self.H, self.D)
        else:
            out[self.decode_rows] = o.view(n, self.H, self.D).to(out.dtype)

    # --- prefill chunks (q_len > 1): the C++ prefill kernel -----------------------------------
    def _prepare_prefills(self) -> None:
        if self.prefill_op is None or not self.prefills:
            super()._prepare_prefills()
            return
        self.prefill_table = pad_sequence([s.pages.long() for s in self.prefills], batch_first=True).contiguous()
        self.prefill_meta = [torch.tensor([getattr(s, f) for s in self.prefills], dtype=torch.long)
                             for f in ("q_start", "q_len", "ctx_len")]

    def _attend_prefills(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         out: torch.Tensor) -> None:
        if self.prefill_op is None or not self.prefills:
            super()._attend_prefills(layer, q, k, v, out)
            return
        if q.stride(2) != 1 or q.stride(1) != self.D:   # the kernel reads rows of contiguous [H, D]
            q = q.contiguous()
        self.prefill_op.prefill_attention(q, self.pool.k[layer], self.pool.v[layer], self.prefill_table,
                                          *self.prefill_meta, self.scale, out, False, self.prefill_bf16_from,
                                          self.prefill_amx, self.windows[layer] or 0)
