"""kv_cache_dtype: the KV pool's dtype apart from the model's. "auto" keeps float16 or bf16 pages
(by CPU level, models/auto_config.py) under a float32 model on the CPU: the default configuration,
so `shared_engine` runs it. The kernels' own checks of mixed dtypes are in test_attention_cpp.py,
test_prefill_attention.py, test_fused_decode.py and test_kernel_driver.py (neon under qemu)."""

from __future__ import annotations

import pytest
import torch

import sgrun
from sgrun.engine.parts.device import resolve_kv_dtype
from sgrun.errors import InvalidRequestError
from sgrun.engine.startup_report import startup_line

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def narrow_kv_engine(shared_engine, model_path):
    """The default int4 model in float32 over auto's narrower pages: `shared_engine` itself wherever
    dtype auto is float32 (every x86 level measured), else one asked for float32 (kv_cache_dtype auto)."""
    if shared_engine.runner.model.dtype == torch.float32:
        yield shared_engine
        return
    engine = sgrun.Engine(str(model_path), dtype="float32", num_threads=2, memory_gb=1.0)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def float32_kv_engine(model_path):
    """The same model over float32 pages (the loaded model is shared)."""
    engine = sgrun.Engine(str(model_path), dtype="float32", num_threads=2, memory_gb=1.0, kv_cache_dtype="float32")
    yield engine
    engine.close()


def test_auto_keeps_narrower_pages_under_a_float32_model(shared_engine, narrow_kv_engine, float32_kv_engine):
    from sgrun.models.auto_config import AUTO_KV_UNDER_FLOAT32, cpu_level
    narrow = AUTO_KV_UNDER_FLOAT32[cpu_level()]
    assert narrow in (torch.float16, torch.bfloat16) or cpu_level() == "scalar"
    model_dtype = shared_engine.runner.model.dtype
    want = narrow if model_dtype == torch.float32 else model_dtype
    assert shared_engine.pool.k[0].dtype == want and shared_engine.pool.v[-1].dtype == want
    engine = narrow_kv_engine
    name = str(narrow).removeprefix("torch.")
    assert engine.runner.model.dtype == torch.float32 and engine.pool.k[0].dtype == narrow
    report = engine.startup_report()
    assert report["dtype"] == "float32" and report["kv_cache_dtype"] == name
    assert f"dtype float32, kv cache {name}," in startup_line(engine.startup_report())
    # the prefill chunks keep the C++ kernel (a narrower pool under float32 queries has its vector paths)
    from sgrun.kernels.cpu.prefill_attention import prefill_kernel_for
    assert engine.runner.attn.prefill_op is prefill_kernel_for(narrow, engine.runner.attn.D, torch.float32)
    assert (engine.runner.attn.prefill_op is None) == (prefill_kernel_for(torch.float32, engine.runner.attn.D) is None)
    assert float32_kv_engine.pool.k[0].dtype == torch.float32
    assert float32_kv_engine.startup_report()["kv_cache_dtype"] == "float32"
    if narrow != torch.float32:
        assert engine.pool.num_pages == 2 * float32_kv_engine.pool.num_pages   # the same memory, twice the pages


def test_resolution_and_refusals():
    f32, bf16 = torch.float32, torch.bfloat16
    from sgrun.models.auto_config import AUTO_KV_UNDER_FLOAT32, auto_kv_dtype, cpu_level
    f16 = torch.float16
    assert auto_kv_dtype(f32, "avx2") == f16 and auto_kv_dtype(f32, "neon") == f16
    assert auto_kv_dtype(f32, "avx512_bf16") == bf16 and auto_kv_dtype(f32, "scalar") == f32
    assert auto_kv_dtype(bf16, "avx2") == bf16 and auto_kv_dtype(f16, "avx512_bf16") == f16
    assert resolve_kv_dtype("auto", f32, CPU, 1, "cpp") == AUTO_KV_UNDER_FLOAT32[cpu_level()]
    assert resolve_kv_dtype("auto", f32, CPU, 1, "torch") == AUTO_KV_UNDER_FLOAT32[cpu_level()]
    assert resolve_kv_dtype("auto", f16, CPU, 1, "cpp") == f16
    assert resolve_kv_dtype("auto", bf16, CPU, 1, "cpp") == bf16
    # Triton's kernels, tensor-parallel workers and CUDA keep the model's dtype.
    assert resolve_kv_dtype("auto", f32, CPU, 1, "triton") == f32
    assert resolve_kv_dtype("auto", f32, CPU, 2, "cpp") == f32
    assert resolve_kv_dtype("auto", f32, torch.device("cuda"), 1, "triton") == f32
    assert resolve_kv_dtype("fp32", f32, CPU, 1, "cpp") == f32
    assert resolve_kv_dtype("bf16", f32, CPU, 1, "cpp") == bf16
    assert resolve_kv_dtype(torch.bfloat16, f32, CPU, 1, "torch") == bf16
    assert resolve_kv_dtype("fp16", f32, CPU, 1, "cpp") == f16
    for bad, args in [("int8", (f32, CPU, 1, "cpp")), ("fp8", (f32, CPU, 1, "cpp")), (None, (f32, CPU, 1, "cpp")),
                      ("float32", (bf16, CPU, 1, "cpp")),       # no float32 pool under a bf16 model
                      ("float16", (bf16, CPU, 1, "cpp")),       # nor float16 under bf16
                      ("float16", (f32, CPU, 1, "triton")),
                      ("bfloat16", (f32, CPU, 1, "triton")), ("bfloat16", (f32, CPU, 2, "cpp")),
                      ("bfloat16", (f32, torch.device("cuda"), 1, "triton"))]:
        with pytest.raises(InvalidRequestError) as err:
            resolve_kv_dtype(bad, *args)
        assert err.value.field == "kv_cache_dtype" and repr(bad) in str(err.value)


def test_engine_refuses_a_bad_kv_cache_dtype_by_name():
    with pytest.raises(InvalidRequestError, match="kv_cache_dtype"):
        sgrun.Engine("random:tiny", dtype="float32", device="cpu", memory_gb=0.05, kv_cache_dtype="int8")


class _Counting:
    """The matmul module with its one-call forwards counted (FusedDecode's decode_forward / decode_logits)."""

    def __init__(self, module):
        self._module, self.calls = module, 0

    def __getattr__(self, name):
        return getattr(self._module, name)

    def decode_forward(self, *args):
        self.calls += 1
        return self._module.decode_forward(*args)

    def decode_logits(self, *args):   # decode_forward between the embedding and the lm_head
        self.calls += 1
        return self._module.decode_logits(*args)


def test_decodes_on_a_narrower_pool_keep_the_one_call_forward(narrow_kv_engine):
    """A float32 model's decode steps over narrower pages still run every layer in one C++ call (the
    write rounds K and V, the attention reads them widened), not the per-layer loop."""
    engine = narrow_kv_engine
    fused = engine.runner.fused
    from sgrun.kernels.cpu import matmul
    assert fused is not None or not matmul.has_tiles()
    if fused is None:   # no matmul tiles at this level: no C++ blocks to run, the loop is torch's
        return
    counting = _Counting(fused.module)
    fused.module = counting
    try:
        out = engine.generate([[1, 2, 3, 4, 5]], sgrun.SamplingParams(max_new_tokens=6, temperature=0,
                                                                      ignore_eos=True))[0]
    finally:
        fused.module = counting._module
    assert len(out.outputs[0].token_ids) == 6 and counting.calls >= 4


def test_narrower_pages_stay_close_to_float32_pages(narrow_kv_engine, float32_kv_engine, chat_prompt):
    """Real weights, the default int4 model, over auto's narrower pages and over float32 ones: chat prompts and
    one of 1,200 tokens (past the prefill's bf16_from split, chunked by the scheduler). The first
    token's top-5 logprobs stay within 0.25 (the int8 activations of the int4 path amplify any
    change of bits: on the haiku prompt the float32 C++ and SDPA prefills differ by 0.07, float16
    against float32 pages by up to 0.17, Zen 4), and where float32's best token leads its second by
    more than 0.3 the first token is the same. bench_drift.py measures the drift from the dense
    float32 reference on 30 prompts."""
    prompts = [chat_prompt("What is the capital of France? Answer in one sentence."),
               chat_prompt("Write a haiku about the sea."), chat_prompt("List three uses of copper."),
               chat_prompt("Translate 'good morning' into French."),
               [(i * 7919) % 30000 + 100 for i in range(1200)]]
    params = sgrun.SamplingParams(max_new_tokens=8, temperature=0, logprobs=5, ignore_eos=True)
    runs = []
    for engine in (narrow_kv_engine, float32_kv_engine):
        engine.flush_cache()
        runs.append(engine.generate(prompts, params))
    clear_leads = 0
    for narrow_out, f32_out in zip(*runs):
        a, b = narrow_out.outputs[0], f32_out.outputs[0]
        top_a = {t[0]: t[2] for t in a.logprobs[0].top}
        top_b = {t[0]: t[2] for t in b.logprobs[0].top}
        shared = set(top_a) & set(top_b)
        assert len(shared) >= 3, (top_a, top_b)
        for tok in shared:
            assert abs(top_a[tok] - top_b[tok]) < 0.25, (tok, top_a, top_b)
        best, second = sorted(top_b.values(), reverse=True)[:2]
        if best - second > 0.3:
            clear_leads += 1
            assert a.token_ids[0] == b.token_ids[0], (top_a, top_b)
    assert clear_leads >= 2   # the check above ran (France and the translation lead by 1.6 and 0.8, Zen 4)


def test_the_cli_flag_reaches_the_engine_keyword():
    """`sgrun generate` / `sgrun serve --kv-cache-dtype` (cli_flags.py) become Engine(kv_cache_dtype=...)."""
    from sgrun.cli import build_parser
    from sgrun.cli_flags import device_kwargs
    assert device_kwargs(build_parser().parse_args(["generate", "hi"]))["kv_cache_dtype"] == "auto"
    args = build_parser().parse_args(["generate", "hi", "--kv-cache-dtype", "float32"])
    assert device_kwargs(args)["kv_cache_dtype"] == "float32"
    with pytest.raises(SystemExit):   # argparse names the choices
        build_parser().parse_args(["generate", "hi", "--kv-cache-dtype", "int8"])
