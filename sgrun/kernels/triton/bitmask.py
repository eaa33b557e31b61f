"""Packed token bitmask applied to logits in place, in Triton, with a plain torch reference.

The bitmask layout is sgrun.constrain.bitmask's: int32 words, token i allowed when bit i % 32
of word i // 32 is set. Only the listed rows are touched; in them every disallowed column, and
every column past the bitmask's width (logits wider than the vocab), becomes -inf.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs without triton: the reference still imports
    triton = None


def apply_bitmask_reference(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None) -> None:
    """In place: for r in rows (all rows when None), logits[r, v] = -inf unless bit v of
    bitmask[r] is set."""
    vocab = logits.shape[1]
    rows_list = range(logits.shape[0]) if rows is None else rows.tolist()
    for r in rows_list:
        for v in range(vocab):
            word = v // 32
            allowed = word < bitmask.shape[1] and (int(bitmask[r, word]) >> (v % 32)) & 1
            if not allowed:
                logits[r, v] = float("-inf")


if triton is not None:

    @triton.jit
    def _apply_bitmask_kernel(logits_ptr, bitmask_ptr, rows_ptr, vocab, num_words,
                              stride_logits, stride_bitmask, BLOCK: tl.constexpr):
        # One program per (listed row, block of BLOCK columns); only masked columns are written.
        row = tl.load(rows_ptr + tl.program_id(0)).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        in_words = cols // 32 < num_words
        words = tl.load(bitmask_ptr + row * stride_bitmask + cols // 32, mask=in_words, other=0)
        allowed = ((words >> (cols % 32)) & 1) != 0
        tl.store(logits_ptr + row * stride_logits + cols, float("-inf"), mask=(cols < vocab) & ~allowed)


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None,
                  block: int = 1024) -> None:
    """Triton version of apply_bitmask_reference: logits [B, V] float, bitmask [B, W] int32 on
    the same device, rows a 1-D integer tensor of row indices (all rows when None)."""
    if triton is None:
        raise RuntimeError("the Triton kernels need triton: pip install 'sgrun[gpu]'; "
                           "on CPU use sgrun.constrain.apply_bitmask")
    assert logits.dim() == 2 and bitmask.dim() == 2 and bitmask.dtype == torch.int32
    assert logits.stride(1) == 1 and bitmask.stride(1) == 1
    if rows is None:
        rows = torch.arange(logits.shape[0], device=logits.device)
    if rows.numel() == 0:
        return
    rows = rows.to(logits.device)
    vocab = logits.shape[1]
    grid = (rows.numel(), triton.cdiv(vocab, block))
    _apply_bitmask_kernel[grid](logits, bitmask, rows, vocab, bitmask.shape[1],
                                logits.stride(0), bitmask.stride(0), BLOCK=block)
