"""The decode forward with its non-attention blocks compiled by torch.compile (inductor's C++
backend on the CPU).

At batch 1 the step is bound by per-op overhead, not by weight bytes: eager runs ~20 small ops
per layer. Everything between two attention calls (llama.py's `inner_block`: o projection +
residual, MLP norm, gate/up, SiLU*up, down + residual, the next layer's norm, its QKV projection
and RoPE) is one compiled graph, reused by every layer (the weights are arguments, not
constants), so a step calls ~32 graphs, inductor fuses each residual-add + RMSNorm + cast, the
RoPE and the SiLU*mul into one C++ loop each, and the weight-only GEMMs stay torch's kernels.
Attention stays eager between the graphs: its backends do per-batch Python work.

The lm_head (an int8 table with float32 activations: logits are never rounded to bf16) has no
fast ATen kernel -- `_weight_int8pack_mm` in float32 takes ~9 ms at batch 1 for SmolLM2's
49152x576 head. Where sgrun's C++ kernel serves (kernels/cpu/matmul.py) the head calls it; elsewhere the
same dot products are written as a reduction, which inductor turns into one vectorised pass over
the int8 bytes (~0.6 ms at batch 1, but it converts the table once per row, so it grows fast).

Shapes: batch sizes up to `max_rows`, the smallest row limit of the model's weight-only kernels
(48 for torch's, 256 for sgrun's C++ int4 kernel on a CPU without AMX: quant_linear.py); larger
prefill chunks are GEMM-bound and stay eager. Dynamo specialises T = 1 and compiles one
dynamic-T graph for 2..max_rows, so at most two graphs per block exist and nothing recompiles on the hot path; both
are compiled by `warm_up` at engine start-up, which reports the seconds it took, or by
`warm_up_in_background` while the engine already serves eagerly: `eligible` is False until the
graphs are ready, so no request waits on the compile (compile_policy.py decides which).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from typing import Callable

import torch

from sgrun.models.llama import LayerBlocks, LlamaModel, first_block, inner_block, layer_tail
from sgrun.models.quant_linear import KERNEL_MAX_ROWS, Int8Linear

log = logging.getLogger("sgrun.engine")

def int8_rows_float32(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [M, K] float32 @ (q [N, K] int8 * scale [N]).T, float32 accumulation; written as a
    broadcast-multiply-sum so that inductor emits one reduction loop over q (never a [M, N, K]
    temporary: it is only ever run compiled)."""
    return (x[:, None, :] * q.to(x.dtype)[None]).sum(-1) * scale


# The fused loops run on the calling thread: at decode sizes (576-3072 elements a row) each is a
# few microseconds of work, while every OpenMP region in them wakes the pool's sleeping workers
# (~10-30 us each). Dynamic-T graphs cannot see that T is small, so with the default they opened
# a parallel region per loop: batch-2 steps took 20.6 ms on two threads against 11.5 ms on one.
# The matmuls inside the graphs are sgrun's kernels, which split across threads themselves.
_INDUCTOR_OPTIONS = {"cpp.threads": 1}


def compile_available() -> bool:
    """torch.compile's CPU backend needs a C++ compiler at run time."""
    from torch._inductor.cpp_builder import get_cpp_compiler
    try:
        get_cpp_compiler()
    except Exception:  # noqa: BLE001 - any failure to find one means: run eagerly
        return False
    return True


class CompiledForward:
    """LlamaModel.forward's twin for batches of at most `max_rows` tokens (CPU, no tensor
    parallelism). Same inputs, same outputs; the compiled graphs are shared by every engine
    that shares the model (loader.py caches models)."""

    def __init__(self, model: LlamaModel):
        self.model = model
        # Every model (dtype, quantization) adds two graphs per block; dynamo's default limit
        # of 8 would quietly run a process's fourth model eagerly.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        self.blocks = LayerBlocks(*(torch.compile(f, dynamic=None, options=_INDUCTOR_OPTIONS)
                                    for f in (first_block, inner_block, layer_tail)))
        head = model.lm_head
        if isinstance(head, Int8Linear) and not head.cpp and head.scale.dtype == torch.float32:
            rows = torch.compile(int8_rows_float32, dynamic=None)
            self.lm_head: Callable = lambda x: rows(x, head.q, head.scale)
        else:
            self.lm_head = head
        self.warm_up_s: float | None = None
        self.ready = False               # both graphs of every block compiled (warm_up done)
        self._lock = threading.Lock()    # one warm-up at a time (a background one and a caller's)
        self.max_rows = min(getattr(lin, "max_rows", KERNEL_MAX_ROWS) for lw in model.layers
                            for lin in (lw.qkv, lw.o, lw.gate_up, lw.down))

    def eligible(self, num_tokens: int) -> bool:
        return self.ready and num_tokens <= self.max_rows

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn, logit_rows: torch.Tensor) -> torch.Tensor:
        return self.model.run_layers(input_ids, positions, attn, logit_rows, self.blocks, self.lm_head)

    def warm_up(self, then: Callable[[float], None] | None = None) -> float:
        """Compile both graphs of every block now (T = 1 and a dynamic T) with a dummy batch
        whose attention is a stand-in, so no request pays for it. Returns the seconds taken.
        `then(seconds)` runs before the graphs are marked ready (the background compile's marker)."""
        with self._lock:
            if self.warm_up_s is not None:
                return 0.0
            t0 = time.perf_counter()
            dev = self.model.device
            for t in (1, 2):
                ids = torch.zeros(t, dtype=torch.long, device=dev)
                positions = torch.arange(t, device=dev)
                self.forward(ids, positions, _NoAttention(), torch.arange(t, device=dev))
            self.warm_up_s = time.perf_counter() - t0
            if then is not None:
                then(self.warm_up_s)
            self.ready = True
            return self.warm_up_s

    def warm_up_in_background(self, done: Callable[[float], None] | None = None) -> threading.Thread:
        """warm_up() on a daemon thread; `done(seconds)` runs on it before the graphs are in use
        (so once `ready` is set, the thread runs no more torch ops). A failure is logged and leaves
        the engine eager (ready stays False).

        At interpreter exit a daemon thread still inside a torch op is killed by a forced unwind
        through C++ frames, which aborts the process ("terminate called without an active
        exception", status 134: seen when a script exited while the old marker measurement ran
        after `ready`). So exit waits for a running warm-up (`_join_at_exit`)."""
        def run() -> None:
            try:
                seconds = self.warm_up(then=done)
            except Exception:  # noqa: BLE001 - the eager forward serves on
                log.exception("background compile failed; the engine stays eager")
                return
            log.info("compiled the decode forward in the background in %.1f s; compiled graphs in use", seconds)
        thread = threading.Thread(target=run, name="sgrun-compile", daemon=True)
        _BACKGROUND.append(thread)
        thread.start()
        return thread


_BACKGROUND: list[threading.Thread] = []


@atexit.register
def _join_at_exit() -> None:
    """Let a background warm-up finish before the interpreter kills daemon threads (see
    warm_up_in_background); atexit handlers run before that."""
    for thread in _BACKGROUND:
        thread.join(timeout=EXIT_JOIN_S)


EXIT_JOIN_S = 120.0   # a cold compile on 2 cores takes ~25 s; past this, exit anyway


class _NoAttention:
    """Warm-up stand-in for an attention backend: returns q's values in a fresh contiguous
    tensor, as the real backends do (the compiled graphs are specialised to their strides)."""

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return q.contiguous()


_COMPILED: "weakref.WeakKeyDictionary[LlamaModel, CompiledForward]" = weakref.WeakKeyDictionary()


def compiled_forward_for(model: LlamaModel) -> CompiledForward:
    """One CompiledForward per model object, so engines sharing a cached model share its graphs."""
    if model not in _COMPILED:
        _COMPILED[model] = CompiledForward(model)
    return _COMPILED[model]
