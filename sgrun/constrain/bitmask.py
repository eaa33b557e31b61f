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


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None) -> None:
    """In place: logits[r, v] = -inf where bit v of bitmask[r] is clear, for r in `rows`
    (all rows when None). Columns past the bitmask's width (logits wider than the vocab) are
    always masked. Unlisted rows are untouched."""
    if rows is not None and rows.numel() == 0:
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
