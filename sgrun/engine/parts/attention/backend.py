"""The attention-backend seam: the batch-metadata type and the protocol every backend implements
(the start-up choice between the backends is choice.py).

A backend is prepared once per batch with the batch's metadata (where the new tokens' K/V go,
and one Segment per scheduled request), then called once per layer to write the new K/V into
the paged pool and attend over each request's whole context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from sgrun.engine.state.page_pool import PagePool


@dataclass
class Segment:
    """One scheduled request in a batch: `q_len` new tokens attending to its whole context
    (cached + new tokens, `ctx_len`) held in the pages `pages`."""
    q_start: int          # first row of this segment in the flat batch
    q_len: int
    ctx_len: int          # context length after this step (cached + new tokens)
    pages: torch.Tensor   # [ceil(ctx_len / page_size)] page ids of the whole context


class AttentionBackend(Protocol):
    pool: PagePool

    def configure(self, scale: float, windows: list[int | None]) -> None:
        """Once, after construction: the softmax scale (1/sqrt(head_dim) unless the model says
        otherwise) and each layer's sliding window (None: global). forward(layer, ...) applies
        layer's window: a query at position p attends keys at positions j with p - window < j <= p.
        A backend that cannot apply windows raises ValueError (never attends globally instead)."""

    def prepare(self, write_pages: torch.Tensor, write_offsets: torch.Tensor, segments: list[Segment]) -> None:
        """Precompute per-batch metadata once; every layer reuses it. The new tokens' K/V go to
        (write_pages[i], write_offsets[i]) in batch row order."""

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [T, H, D], k/v: [T, KV, D] for the new tokens of layer `layer`. Returns [T, H, D]."""
