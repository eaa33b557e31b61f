"""Packed token bitmasks (int32 words; token i is bit i % 32 of word i // 32, like xgrammar)
and the one vectorised masking operation the engine runs per decode step."""

from __future__ import annotations

import numpy as np
import torch


def num_words(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def pack_token_ids(ids: np.ndarray, vocab_size: int) -> torch.Tensor:
    bits = np.zeros(num_words(vocab_size) * 32, dtype=np.bool_)
    bits[ids] = True
    return torch.from_numpy(np.packbits(bits, bitorder="little").view("<i4").astype(np.int32, copy=False))


def unpack_bitmask(row: torch.Tensor, vocab_size: int) -> np.ndarray:
    """Boolean allowed-array of length vocab_size (tests and debugging)."""
    words = row.detach().cpu().numpy().astype("<i4", copy=False)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    return bits[:vocab_size].astype(bool)


def allocate_bitmask(batch: int, vocab_size: int) -> torch.Tensor:
    return torch.full((batch, num_words(vocab_size)), -1, dtype=torch.int32)


_SHIFTS: dict[torch.device, torch.Tensor] = {}


def _shifts(device: torch.device) -> torch.Tensor:
    s = _SHIFTS.get(device)
    if s is None:
        s = torch.arange(32, dtype=torch.int32, device=device)
        _SHIFTS[device] = s
    return s


# byte value -> the 8 additive biases (0 allowed, -inf masked) of its bits, low bit first
_BYTE_BIAS = np.array([[0.0 if (v >> k) & 1 else -np.inf for k in range(8)] for v in range(256)], dtype=np.float32)


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None) -> None:
    """In place: logits[r, v] = -inf where bit v of bitmask[r] is clear, for r in `rows`
    (all rows when None). Columns past the bitmask's width (logits wider than the vocab) are
    always masked. Unlisted rows are untouched."""
    if rows is not None and rows.numel() == 0:
        return
    if (logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.is_contiguous()
            and bitmask.device.type == "cpu" and logits.dim() == 2):
        _apply_bitmask_cpu(logits, bitmask, rows)
        return
    vocab = logits.shape[-1]
    masks = bitmask if rows is None else bitmask.index_select(0, rows.to(bitmask.device))
    masks = masks.to(logits.device)
    # [R, W, 32] booleans -> [R, W*32]
    allowed = ((masks.unsqueeze(-1) >> _shifts(logits.device)) & 1).bool().flatten(1)
    width = allowed.shape[1]
    if width >= vocab:
        allowed = allowed[:, :vocab]
    else:
        allowed = torch.cat([allowed, allowed.new_zeros(allowed.shape[0], vocab - width)], dim=1)
    if rows is None:
        logits.masked_fill_(~allowed, float("-inf"))
    else:
        r = rows.to(logits.device)
        sub = logits.index_select(0, r).masked_fill_(~allowed, float("-inf"))
        logits.index_copy_(0, r, sub)


def _apply_bitmask_cpu(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None) -> None:
    """Word-level numpy version: all-allowed words are skipped, all-masked words filled, and
    only mixed words expanded through a byte table. Single-threaded on purpose: the elementwise
    torch version spends most of its time waking threads on a busy CPU (tens of ms per step)."""
    ln = logits.numpy()
    masks = bitmask.numpy().astype(np.int32, copy=False)
    row_ids = np.arange(ln.shape[0]) if rows is None else rows.cpu().numpy().astype(np.int64)
    vocab = ln.shape[1]
    full = min(masks.shape[1], vocab // 32)  # words whose 32 columns all exist in the logits
    m = masks[row_ids, :full] if rows is not None else masks[:, :full]
    view = ln[:, :full * 32].reshape(ln.shape[0], full, 32)
    zr, zw = np.nonzero(m == 0)
    view[row_ids[zr], zw] = -np.inf
    mr, mw = np.nonzero((m != 0) & (m != -1))
    if len(mr):
        vals = np.ascontiguousarray(m[mr, mw]).view(np.uint8)
        view[row_ids[mr], mw] += _BYTE_BIAS[vals].reshape(len(mr), 32)
    if full * 32 < vocab:
        start = full * 32
        bits = np.unpackbits(masks[row_ids, full:].view(np.uint8), axis=1, bitorder="little").view(np.bool_)
        width = min(bits.shape[1], vocab - start)
        tail = ln[row_ids, start:]
        tail[:, :width][~bits[:, :width]] = -np.inf
        tail[:, width:] = -np.inf
        ln[row_ids, start:] = tail
