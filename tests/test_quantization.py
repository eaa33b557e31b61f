"""Quantized linears: the int8/int4 kernels against their own dequantized weights (tiny random
shapes), and the real SmolLM2 model under int8/int4 against the dense model (float32)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import sgrun
from sgrun.errors import InvalidRequestError
from sgrun.models.quant_linear import KERNEL_MAX_ROWS, DenseLinear, Int4Linear, Int8Linear, _unpack_int4, make_linear

TEXT = (Path(__file__).parent.parent / "benchmarks" / "data" / "perplexity_text.txt").read_text()


def test_int4_unpack_inverts_torch_packer():
    q = torch.randint(0, 16, (192, 96), dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2)
    assert torch.equal(_unpack_int4(packed, 192, 96).int(), q)


def test_int4_reproduces_q4_1_blocks_exactly():
    # Weights already on a Q4_1 grid (per 32-block: d * code + m, both extreme codes used) come back exactly.
    n, k = 128, 64
    codes = torch.randint(0, 16, (n, k // 32, 32))
    codes[..., 0], codes[..., 1] = 0, 15
    # Q4_1 stores d and m as fp16 (so does sgrun's kernel layout): the grid is fp16's.
    d = (torch.rand(n, k // 32, 1) * 0.1 + 0.01).half().float()
    m = torch.randn(n, k // 32, 1).half().float()
    w = (codes * d + m).view(n, k)
    lin = Int4Linear(w, None, torch.float32)
    assert torch.allclose(lin.dequantized(), w, atol=1e-5)


@pytest.mark.parametrize("cls", [Int8Linear, Int4Linear])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_path_matches_dequantized_path(cls, dtype):
    torch.manual_seed(0)
    w = torch.randn(128, 96) * 0.05
    bias = torch.randn(128)
    lin = cls(w, bias, dtype)
    for rows in (1, 5, KERNEL_MAX_ROWS, KERNEL_MAX_ROWS + 3):   # both sides of the kernel/dense switch
        x = torch.randn(rows, 96, dtype=dtype)
        want = x.float() @ lin.dequantized().float().t() + bias
        got = lin(x).float()
        # float32 x int4 runs the int8-activation tiles (x quantized per block of 32, llama.cpp's Q8 way):
        # accurate to int8 activations, not to a float32 product.
        exact = dtype == torch.float32 and cls is Int8Linear
        tol = 1e-4 if exact else 3e-2 * want.abs().max().item()
        assert got.shape == (rows, 128) and (got - want).abs().max().item() < tol
    # and the quantization itself is close to the original weights
    err = (lin.dequantized().float() - w).abs().max().item()
    assert err < (0.05 * 4 / 127 if cls is Int8Linear else 0.05 * 8 / 15)


def test_make_linear_modes_and_memory():
    w = torch.randn(256, 128)
    dense, i8, i4 = (make_linear(w, None, m, torch.bfloat16) for m in ("none", "int8", "int4"))
    assert isinstance(dense, DenseLinear) and isinstance(i8, Int8Linear) and isinstance(i4, Int4Linear)
    assert i8.nbytes() < 0.52 * dense.nbytes() and i4.nbytes() < 0.35 * dense.nbytes()
    # a shape the int4 kernel cannot tile falls back to int8 instead of failing
    assert isinstance(make_linear(torch.randn(100, 128), None, "int4", torch.float32), Int8Linear)


def test_bad_quantization_is_a_clear_error(model_path):
    with pytest.raises(InvalidRequestError, match="quantization must be one of auto, none, int8, int4"):
        sgrun.Engine(str(model_path), quantization="int3")


def _perplexity(engine: sgrun.Engine) -> tuple[float, list[float]]:
    ids = engine.tokenizer.encode(TEXT, add_bos=False)[:256]
    logprobs = engine.score(ids[:1], [ids[1:]])[0]
    return math.exp(-sum(logprobs) / len(logprobs)), logprobs


def test_real_model_int8_int4_close_to_dense(model_path, float32_engine):
    """On the Q4_1 file, int4 keeps the file's own layer codes and int8 re-quantizes them per
    row; both re-quantize the Q8_0 embedding / lm_head per row. Both stay close in logprobs and
    perplexity, and greedy decoding through the small-batch kernels follows the dense model.
    Measured (float32, 255 tokens, 1 December 2026): int4 perplexity 31.122 against dense 31.056,
    max |logprob error| 0.158; int8 31.279 (max 0.470). The bounds leave ~2x margin."""
    dense_ppl, dense_lp = _perplexity(float32_engine)
    prompt = float32_engine.tokenizer.encode("The three primary colours are", add_bos=False)
    params = sgrun.SamplingParams(max_new_tokens=12, temperature=0)
    dense_out = float32_engine.generate([prompt], params)[0].token_ids
    dense_next = _next_tokens(float32_engine, prompt, dense_out)
    bounds = {"int4": (0.02, 0.35), "int8": (0.03, 0.6)}   # (ppl relative error, max |logprob error|)
    for mode, (ppl_tol, lp_tol) in bounds.items():
        with sgrun.Engine(str(model_path), dtype="float32", num_threads=2, memory_gb=0.2, quantization=mode) as eng:
            assert eng.quantization == mode
            ppl, lp = _perplexity(eng)
            lp_err = max(abs(a - b) for a, b in zip(lp, dense_lp))
            print(f"{mode}: perplexity {ppl:.3f} (dense {dense_ppl:.3f}), max |logprob error| {lp_err:.3f}")
            assert abs(ppl / dense_ppl - 1) < ppl_tol, (mode, ppl, dense_ppl)
            assert lp_err < lp_tol, (mode, lp_err)
            # Teacher-forced along the dense greedy path, so one near tie does not decide every token
            # after it: the quantized model's pick is the dense one wherever dense is not a near tie
            # (top two within 0.35 nats: int4 moves logprobs by up to a few tenths).
            got = _next_tokens(eng, prompt, dense_out)
            wrong = [i for i, ((mine, _), (ref, margin)) in enumerate(zip(got, dense_next)) if mine != ref and margin > 0.35]
            assert not wrong, (mode, wrong, got, dense_next)


def _next_tokens(engine, prompt: list[int], path: list[int]) -> list[tuple[int, float]]:
    """At each position of `path` (after the prompt and the path before it): the greedy next token
    and its margin over the runner-up, in nats."""
    params = sgrun.SamplingParams(max_new_tokens=1, temperature=0, logprobs=2)
    outs = engine.generate([prompt + path[:i] for i in range(len(path))], params)
    out = []
    for o in outs:
        top = o.outputs[0].logprobs[0].top
        out.append((top[0][0], top[0][2] - top[1][2]))
    return out


def test_default_follows_the_file(model_path):
    from sgrun.models.loader import stored_quantization
    assert stored_quantization(model_path) == "int4"   # SmolLM2 Q4_1: layer linears are Q4_1


def test_cli_flag_reaches_the_engine_options():
    from sgrun.cli import build_parser
    assert build_parser().parse_args(["generate", "hi"]).quantization == "auto"
    assert build_parser().parse_args(["serve", "--quantization", "int8"]).quantization == "int8"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--quantization", "int3"])
