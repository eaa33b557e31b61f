"""The torch.compile'd decode forward (sgrun/models/compiled_forward.py) equals the eager one:
float32, greedy tokens identical and logits within float rounding; and after the start-up
warm-up nothing recompiles for any batch size it serves."""

from __future__ import annotations

import pytest
import torch

import sgrun
from sgrun.models.compiled_forward import _NoAttention, int8_rows_float32

PROMPTS = ["The history of the Roman Empire", "def fibonacci(n):\n    ", "Paris is"]


@pytest.mark.parametrize("rows", [1, 3, 17])
def test_int8_lm_head_reduction_matches_float64(rows):
    g = torch.Generator().manual_seed(rows)
    q = torch.randint(-127, 128, (320, 96), dtype=torch.int8, generator=g)
    scale = torch.rand(320, generator=g) / 100
    x = torch.randn(rows, 96, generator=g)
    got = torch.compile(int8_rows_float32, dynamic=False)(x, q, scale)
    ref = x.double() @ (q.double() * scale.double()[:, None]).T
    assert got.dtype == torch.float32 and got.shape == (rows, 320)
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def int8_engines(model_path):
    """int8 float32: its lm_head is the compiled int8 reduction. Both engines share one model. Their
    KV pages are float32 (kv_cache_dtype "auto" would round K and V to float16): the claim is equality
    up to float32 reassociation, which a float16 rounding boundary between the two would amplify
    (a top logprob 2e-4 apart on float16 pages, Zen 4)."""
    with sgrun.Engine(str(model_path), dtype="float32", num_threads=2, memory_gb=0.1, quantization="int8",
                      compile=True, kv_cache_dtype="float32") as on, \
         sgrun.Engine(str(model_path), dtype="float32", num_threads=2, memory_gb=0.1, quantization="int8",
                      compile=False, kv_cache_dtype="float32") as off:
        # The claim here is compiled against eager: neither runs the C++ blocks, which int8 float32
        # models otherwise decode on (tests/test_fused_decode.py tests those).
        on.runner.fused = off.runner.fused = None
        yield on, off


def test_compiled_engine_reports_its_warm_up(int8_engines):
    on, off = int8_engines
    assert on.runner.compiled is not None and off.runner.compiled is None
    assert on.model is off.model
    report = on.startup_report()
    assert report["compile"] is True and report["compile_warm_up_s"] >= 0
    assert off.startup_report()["compile"] is False


def test_compiled_greedy_tokens_and_logprobs_equal_eager(int8_engines):
    on, off = int8_engines
    params = sgrun.SamplingParams(max_new_tokens=8, temperature=0, ignore_eos=True, logprobs=3)
    # Together: a batch of decodes (T = 3, the dynamic graph); alone: T = 1 (the static one).
    for prompts in (PROMPTS, PROMPTS[:1]):
        got, want = on.generate(prompts, params), off.generate(prompts, params)
        for g, w in zip(got, want):
            assert g.token_ids == w.token_ids
            for lg, lw in zip(g.outputs[0].logprobs, w.outputs[0].logprobs):
                assert [t for t, _, _ in lg.top] == [t for t, _, _ in lw.top]
                # The int8 lm_head rounds its input to 16-bit steps per group of 32 (1/32,512 of the
                # group's largest value, matmul_common.cpp's Quant16Rows): a last-bit difference in the
                # compiled graph's final norm can move an input by one step, a logprob by ~1e-3.
                for (_, _, a), (_, _, b) in zip(lg.top, lw.top):
                    assert abs(a - b) < 1e-2
    assert on.runner.compiled.model is on.model


def test_compiled_logits_equal_eager_forward_and_never_recompile(int8_engines):
    on, _ = int8_engines
    compiled, model = on.runner.compiled, on.model
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for t in (1, 2, 5, compiled.max_rows):
        ids = torch.randint(0, model.cfg.vocab_size, (t,), generator=torch.Generator().manual_seed(t))
        pos = torch.arange(7, 7 + t)
        rows = torch.arange(t)
        got = compiled.forward(ids, pos, _NoAttention(), rows)
        want = model.forward(ids, pos, _NoAttention(), rows)
        # Logits reach |30|; 30 layers of float32 sums in another order differ by ~1e-4, and the
        # int8 lm_head's 16-bit input steps (Quant16Rows) turn a last-bit difference in one input into
        # one step (~3e-3 here) times its weights: ~4e-3 at most measured.
        torch.testing.assert_close(got, want, rtol=1e-4, atol=2e-2)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == frames, "a batch size recompiled"
    assert not compiled.eligible(compiled.max_rows + 1)


def test_compile_switch_on_the_cli_and_a_clear_error(model_path):
    from sgrun.cli import build_parser
    args = build_parser().parse_args(["generate", "hi", "--no-compile"])
    from sgrun.cli_flags import device_kwargs
    assert device_kwargs(args)["compile"] is False
    assert device_kwargs(build_parser().parse_args(["generate", "hi", "--compile"]))["compile"] is True
    with pytest.raises(sgrun.InvalidRequestError, match="tp=1"):
        from sgrun.engine.parts.compile_policy import start_compile
        start_compile(None, torch.device("cuda"), True, 1)
