"""Triton kernels, each with a pure-torch reference (see docs/kernels.md).

Importing this package never needs triton: the kernels are defined only when it is installed,
and calling one without it raises a RuntimeError that says what to install.
"""

from sgrun.kernels.bitmask import apply_bitmask, apply_bitmask_reference
from sgrun.kernels.paged_attention import (
    paged_decode_attention,
    paged_decode_attention_reference,
    paged_prefill_attention,
    paged_prefill_attention_reference,
)

__all__ = [
    "apply_bitmask",
    "apply_bitmask_reference",
    "paged_decode_attention",
    "paged_decode_attention_reference",
    "paged_prefill_attention",
    "paged_prefill_attention_reference",
]
