"""Start-up and `auto`: the built-model cache, the compile policy and the per-CPU-level choice table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import sgrun
from sgrun.kernels.cpu import isa
from sgrun.engine.parts import compile_policy
from sgrun.engine.startup_report import startup_line
from sgrun.models import auto_config, model_cache
from sgrun.models.loader import load_model, resolve_dtype

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A private, empty $SGRUN_CACHE holding only the model file (linked, not downloaded)."""
    from sgrun.models.fetch import default_model_path
    model = default_model_path()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / model.name).symlink_to(model)
    monkeypatch.setenv("SGRUN_CACHE", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    return tmp_path


def test_auto_table_covers_every_level_and_picks_what_measured_fastest_there():
    for level in ("amx", "avx512_bf16", "avx512", "avx2", "neon_dotprod", "neon", "scalar"):
        assert level in auto_config.AUTO_TABLE, level
        assert auto_config.AUTO_TABLE[level].measured
    # Forced avx2: float32 int4 prefilled >28x faster than bf16 (emulated bf16 GEMMs), decode 0.92x.
    assert auto_config.auto_choice("avx2").dtype == torch.float32
    assert auto_config.auto_choice("avx2").keep_file_quantization
    # Intel Xeon with AMX: float32 int4 decoded 1.5x bf16 int4; bf16 prefilled 1.2x faster
    assert auto_config.auto_choice("amx").dtype == torch.float32
    assert auto_config.auto_choice("amx").keep_file_quantization
    # Zen 4 at avx512_bf16: float32 int4 decoded 1.25x bf16 int4 (the float32 int8-activation tiles)
    assert auto_config.auto_choice("avx512_bf16").dtype == torch.float32
    assert auto_config.auto_choice("avx512_bf16").keep_file_quantization


def test_auto_dtype_and_quantization_follow_the_table_for_the_level_in_force():
    row = auto_config.auto_choice(auto_config.cpu_level())
    assert resolve_dtype("auto", torch.device("cpu")) == row.dtype
    assert auto_config.auto_quantization("int4", torch.device("cpu")) == ("int4" if row.keep_file_quantization else "none")
    assert auto_config.auto_quantization("int4", torch.device("cuda")) == "none"


def test_start_up_line_names_level_dtype_weights_kernels_and_compile(model_path):
    with sgrun.Engine(str(model_path), num_threads=2, memory_gb=0.1, compile=False) as engine:
        report = engine.startup_report()
        line = startup_line(report)
    assert f"cpu level {auto_config.cpu_level()}" in line
    assert f"dtype {str(engine.dtype).replace('torch.', '')}" in line
    assert "weights int4" in line and "attention " in line and line.endswith("compile off")
    assert report["compile"] is False and report["weights"].startswith("int4")
    # at amx a float32 model's prefill-sized int4 matmuls run on AMX-INT8 tiles, whether its linears
    # were built here or came back from the built-model cache (pickled under their build's level name)
    tiles = (auto_config.cpu_level() == "amx" and engine.dtype == torch.float32
             and {"amx_tile", "amx_int8"} <= isa.cpu_features())
    assert ("AMX-INT8" in report["weights"]) == tiles, report["weights"]
    # the prefill attention names its vector path (amx: the AVX512-BF16 walk on AMX tiles, at the
    # amx level), and on a float32 pool where bf16 products start
    attn = engine.runner.kernels
    if getattr(attn, "prefill_op", None) is not None:
        path = attn.prefill_op.fast_path(str(engine.dtype).replace("torch.", ""), attn.D)
        on_tiles = auto_config.cpu_level() == "amx" and path == "avx512_bf16"
        assert attn.prefill_amx == on_tiles
        named = "amx" if on_tiles else path
        assert f"prefill sgrun C++ {named}" in line, line
        assert ("bf16 products from position" in line) == (named in ("avx512_bf16", "amx")
                                                           and engine.dtype == torch.float32), line


def test_built_model_cache_reuses_rebuilds_when_corrupt_and_can_be_switched_off(cache_dir, monkeypatch):
    from sgrun.models import loader
    from sgrun.models.compiled_forward import _NoAttention
    monkeypatch.setattr(loader, "_MODELS", {})
    first, _, _ = load_model(None, torch.bfloat16, "int4", "cpu")
    (entry,) = (cache_dir / "built_models").glob("*.pt")
    monkeypatch.setattr(loader, "_MODELS", {})     # a new process: nothing in memory
    real_files = loader.load_model_files
    calls = []
    monkeypatch.setattr(loader, "load_model_files", lambda *a, **k: calls.append(a) or real_files(*a, **k))
    second, tok, _ = load_model(None, torch.bfloat16, "int4", "cpu")
    assert calls == [], "the cached model was rebuilt from the file"
    assert second is not first and tok.vocab_size > 0
    ids, pos = torch.tensor([1, 2, 3]), torch.arange(3)
    with torch.inference_mode():
        torch.testing.assert_close(second.forward(ids, pos, _NoAttention(), pos),
                                   first.forward(ids, pos, _NoAttention(), pos), rtol=0, atol=0)
    entry.write_bytes(b"not a model")               # a truncated or foreign file: rebuilt, saved again
    monkeypatch.setattr(loader, "_MODELS", {})
    third, _, _ = load_model(None, torch.bfloat16, "int4", "cpu")
    assert calls and third.quantization == "int4" and entry.stat().st_size > 1000
    monkeypatch.setenv(model_cache.DISABLE_ENV, "0")
    built = []
    assert model_cache.cached_build("y", "k", lambda: built.append(1) or 8) == 8
    assert built and not list((cache_dir / "built_models").glob("y-*"))


def test_one_shot_compiles_only_with_a_warm_marker_that_pays(cache_dir, monkeypatch):
    monkeypatch.delenv("SGRUN_COMPILE", raising=False)
    model, _, _ = load_model("random:tiny", torch.float32, "none", "cpu")
    assert not compile_policy.one_shot_compile(model, 10_000), "cold cache: generate must stay eager"
    # The engine is built with that decision (EngineOptions.one_shot_tokens): nothing compiles where
    # it does not pay, or where the C++ decode blocks serve the model, and nothing is swapped in later.
    cpu = torch.device("cpu")
    assert compile_policy.start_compile(model, cpu, None, 1, one_shot_tokens=10_000) == (None, None)
    path = compile_policy.marker_path(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"warm_up_s": 2.0, "eager_step_s": 0.010, "compiled_step_s": 0.006}))
    assert not compile_policy.one_shot_compile(model, 100)      # saves 0.4 s, costs 2 s
    assert compile_policy.one_shot_compile(model, 1000)         # saves 4 s
    assert compile_policy.start_compile(model, cpu, None, 1, fused_serves=True, one_shot_tokens=1000) == (None, None)
    assert compile_policy.start_compile(model, cpu, None, 1, one_shot_tokens=100) == (None, None)
    monkeypatch.setenv("SGRUN_COMPILE", "0")
    assert not compile_policy.one_shot_compile(model, 1000)


def test_inductor_cache_lives_under_sgrun_cache(cache_dir, monkeypatch):
    assert compile_policy.use_sgrun_inductor_cache() == str(cache_dir / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/else")
    assert compile_policy.use_sgrun_inductor_cache() == "/somewhere/else"


@pytest.mark.slow   # a cold inductor compile: minutes on two busy cores (timed out at 900 s at load 18)
def test_default_engine_serves_eagerly_while_it_compiles_in_the_background(monkeypatch, tmp_path):
    # The shared inductor cache (warm after the first run: a cold compile on 2 busy cores takes
    # minutes); the warm marker goes to a private folder.
    from sgrun.models.fetch import cache_dir
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(cache_dir() / "inductor"))
    monkeypatch.setenv("SGRUN_CACHE", str(tmp_path))
    monkeypatch.delenv("SGRUN_COMPILE", raising=False)
    with sgrun.Engine("random:tiny", dtype="float32", num_threads=2, memory_gb=0.05) as engine:
        assert engine.parts.compiled is not None and engine.startup_report()["compile"] == "background"
        params = sgrun.SamplingParams(max_new_tokens=4, temperature=0, ignore_eos=True)
        eager = engine.generate(["a b c"], params)[0].token_ids     # answered whether or not compiled yet
        import time
        deadline = time.time() + 600
        while not engine.parts.compiled.ready and time.time() < deadline:
            time.sleep(0.1)
        assert engine.parts.compiled.ready
        assert engine.generate(["a b c"], params)[0].token_ids == eager   # float32: same greedy tokens
        assert engine.startup_report()["compile_warm_up_s"] > 0
    marker = compile_policy.read_marker(engine.model)
    assert marker is not None and marker["compiled_step_s"] > 0 and marker["eager_step_s"] > 0


def test_exit_after_a_background_compile_is_clean(tmp_path):
    """A script that exits once the background compile is in use (or while it runs) ends with
    status 0: daemon threads inside torch ops at exit used to abort the process (status 134). Dense
    float32 weights: the default int4 model compiles nothing (its decode runs the C++ blocks)."""
    script = (
        "import sys, time, sgrun\n"
        "e = sgrun.Engine(num_threads=2, memory_gb=0.3, dtype='float32', quantization='none')\n"
        "e.generate([[5, 6, 7]], sgrun.SamplingParams(max_new_tokens=2, temperature=0))\n"
        "t0 = time.time()\n"
        "while sys.argv[1] == 'wait' and e.parts.compiled is not None and not e.parts.compiled.ready "
        "and time.time() - t0 < 300:\n"
        "    time.sleep(0.05)\n"
        "print('compiled', e.parts.compiled is not None and e.parts.compiled.ready)\n")
    for mode in ("wait", "early"):
        out = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=600,
                             cwd=tmp_path, env={**{k: v for k, v in os.environ.items() if k != "SGRUN_COMPILE"},
                                                              "PYTHONPATH": str(ROOT)})
        assert out.returncode == 0, (mode, out.returncode, out.stderr[-2000:])
        if mode == "wait":
            assert "compiled True" in out.stdout, out.stdout
