"""Which KV pool dtypes the CPU kernels take under a model of a given dtype: the one rule that
engine/parts/device.py (kv_cache_dtype's resolution), engine/parts/attention/cpp_backend.py (the KV write and
the one-call decode forward) and kernels/cpu/prefill_attention.py (the prefill paths) all ask.

A pool holds the model's own dtype, or, under a float32 model, the narrower bf16 or float16
(kv_cache_dtype): K and V are rounded to nearest even as they are written and widened exactly
as they are read, so queries, products, sums and outputs stay float32. A bf16 or float16
model's pool is never wider or narrower than the model: nothing would be gained.
"""

from __future__ import annotations

import torch

# The narrower pools a float32 model may keep.
NARROWER_UNDER_FLOAT32 = (torch.bfloat16, torch.float16)


def pool_dtypes_under(model_dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """The pool dtypes the kernels take under a `model_dtype` model, its own first."""
    return (model_dtype, *NARROWER_UNDER_FLOAT32) if model_dtype == torch.float32 else (model_dtype,)
