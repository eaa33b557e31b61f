"""Triton kernels, each with a pure-torch reference (see docs/kernels.md).

Importing this package never needs triton: the kernels are defined only when it is installed,
and calling one without it raises a RuntimeError that says what to install.
"""

from sgrun.kernels.triton.attention_reference import (
    paged_decode_attention_reference,
    paged_prefill_attention_reference,
    write_kv_reference,
)
from sgrun.kernels.triton.bitmask import apply_bitmask, apply_bitmask_reference
from sgrun.kernels.triton.decode_attention import decode_num_splits, paged_decode_attention
from sgrun.kernels.triton.extend_attention import paged_prefill_attention
from sgrun.kernels.triton.kv_write import write_kv

__all__ = [
    "apply_bitmask",
    "apply_bitmask_reference",
    "decode_num_splits",
    "paged_decode_attention",
    "paged_decode_attention_reference",
    "paged_prefill_attention",
    "paged_prefill_attention_reference",
    "write_kv",
    "write_kv_reference",
]
