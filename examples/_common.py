"""Shared by the examples: the backend to run on and the output length (tests shrink it)."""

from __future__ import annotations

import os

import sgrun


def max_tokens(default: int) -> int:
    """SGRUN_EXAMPLE_MAX_TOKENS caps every example's generation length (the tests set it low)."""
    cap = os.environ.get("SGRUN_EXAMPLE_MAX_TOKENS")
    return min(default, int(cap)) if cap else default


def default_backend() -> sgrun.Runtime:
    """The default model (SmolLM2-135M-Instruct) in this process."""
    return sgrun.Runtime(dtype="float32")
