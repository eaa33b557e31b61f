"""How closely two computations of the same log-probability agree on an engine's dtype, for tests
that compare the engine's decode against a teacher-forced or plain forward of the same tokens.

float32 agrees to 2e-3. bf16 (what dtype auto picks on CPUs with native bf16, so the default
configuration there) keeps ~3 significant digits: measured on the default int4 SmolLM2, the
compiled decode and the teacher-forced prefill differ by 4e-3 at logprob -0.95, 4.9e-2 at -6.6
and 5.1e-2 at -3.0; select's scores and a plain forward by 8.9e-2 at -9.4 (0.95%). So bf16
allows 0.1 plus 1%. A placeholder or a renormalised logprob is outside either bound for any
token the model does not already give ~all its mass.

float32 over int4 weights (what dtype auto picks on AVX2-only CPUs, so the default there) runs the
decode's matmuls on the int8-activation tiles (activations rounded to 8 bits per group of 32, as
llama.cpp's Q8_1 does), while a teacher-forced prefill dequantizes the weights and multiplies in
float32. Measured on an AVX2-only AMD EPYC (tests/test_jump_forward_accounting.py's schema): the
two differ by 0.087 at -0.89 and by 0.50 at -6.09 (dense float32 weights: 2e-5). So that
configuration allows 0.15 plus 10%: a placeholder (0) or renormalised logprob is still outside
it for every token below ~90% probability."""

from __future__ import annotations

import torch


def logprob_tolerance(engine) -> dict:
    """Keyword arguments for pytest.approx on the engine's logprobs."""
    if engine.dtype != torch.float32:
        return dict(abs=0.1, rel=1e-2)
    if engine.quantization in (None, "none"):
        return dict(abs=2e-3)
    return dict(abs=0.15, rel=0.1)
