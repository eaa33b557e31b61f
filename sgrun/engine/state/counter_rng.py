"""Counter-based random numbers for sampling: the noise of row r at vocab column c is a pure
hash of (request seed, request step, c), so a request's draw never depends on what shares its
batch, on the batch order, or on the device's RNG state — and one vectorised call covers the
whole batch (no torch.Generator per row, no per-row loop).

The hash is a 32-bit integer mixer (xor-shift-multiply rounds) computed in int64 tensors, whose
products stay under 2**60, so it is exact and identical on CPU and CUDA.
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
_MUL = 0x45D9F3B            # mixer multiplier (< 2**27: x * _MUL < 2**59 for 32-bit x)
_STEP_MUL = 0x9E3779B1      # golden-ratio constants decorrelate steps and columns
_COL_MUL = 0x85EBCA6B

_column_keys: dict[tuple[int, torch.device], torch.Tensor] = {}


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """x: int64 tensor of 32-bit values -> a well-mixed 32-bit hash of each (int64)."""
    x = x & _M32
    x = (((x >> 16) ^ x) * _MUL) & _M32
    x = (((x >> 16) ^ x) * _MUL) & _M32
    x = (((x >> 16) ^ x) * _MUL) & _M32
    return (x >> 16) ^ x


def _columns(vocab: int, device: torch.device) -> torch.Tensor:
    key = (vocab, device)
    if key not in _column_keys:
        cols = torch.arange(vocab, dtype=torch.int64, device=device)
        _column_keys[key] = _mix32((cols * _COL_MUL) & _M32)
    return _column_keys[key]


def row_keys(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """seeds [B] (any 63-bit values), steps [B] (< 2**31), both int64 -> one 32-bit key per row."""
    k = _mix32(seeds ^ _mix32(seeds >> 32))
    return _mix32(k ^ ((steps * _STEP_MUL) & _M32))


def uniform(seeds: torch.Tensor, steps: torch.Tensor, vocab: int) -> torch.Tensor:
    """[B, vocab] float32 uniforms strictly inside (0, 1); row b depends only on (seeds[b], steps[b])."""
    bits = _mix32(row_keys(seeds, steps)[:, None] ^ _columns(vocab, seeds.device)[None, :])
    return bits_to_unit(bits)


_BELOW_ONE = 1.0 - 2.0 ** -24   # the largest float32 under 1


def bits_to_unit(bits: torch.Tensor) -> torch.Tensor:
    """32-bit hashes -> float32 uniforms strictly inside (0, 1). The top 24 bits plus a half step
    fill a float32 mantissa, except the very top value: (2**24 - 0.5) / 2**24 rounds to exactly
    1.0 in float32, whose Gumbel noise is +inf, and +inf added to a masked logit (-inf) is NaN,
    which argmax picks: a constrained request would sample a token its mask forbids (about one
    column in 2**24 of every row, so a few times a second at batch 40). Clamp it below 1."""
    return (((bits >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))).clamp_(max=_BELOW_ONE)


def gumbel(seeds: torch.Tensor, steps: torch.Tensor, vocab: int) -> torch.Tensor:
    """Standard Gumbel noise: argmax(logits + gumbel) is a draw from softmax(logits)."""
    return -torch.log(-torch.log(uniform(seeds, steps, vocab)))
