"""The model as the engine uses it: the seam between the engine and sgrun.models.

`LlamaModel` (models/llama.py) is one; so are tensor parallelism's rank-0 `TensorParallelModel`
(tp_group.py) and the test doubles that wrap a real model. The engine never needs more than this.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from sgrun.models.config import ModelConfig


class ModelLike(Protocol):
    cfg: ModelConfig          # this process's shape (with tp, rank 0's shard: its heads, its KV heads)
    dtype: torch.dtype
    quantization: str

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any,
                logit_rows: torch.Tensor) -> torch.Tensor:
        """Write the new tokens' K/V through `attn` (prepared for this batch) and return the
        float32 logits of `logit_rows` ([len(logit_rows), vocab])."""
        ...
