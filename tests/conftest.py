"""Shared fixtures on the real SmolLM2 weights for the whole session: `shared_engine` (and its
per-test view `engine`) in the default configuration a user gets, and `float32_engine`, the dense
float32 reference, for the few tests that compare against an exact float32 forward."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# No GPU in CI: Triton kernels run through the interpreter. It must be set before anything
# imports triton (triton fixes its mode at import time); the gpu-marked tests use a subprocess.
os.environ.setdefault("TRITON_INTERPRET", "1")
# torch.compile's warm-up costs seconds per model on a 2-core CI machine, and the suite builds
# engines on many models (and server subprocesses, which inherit this): engines compile only
# where a test asks (compile=True). The default int4 model needs no compile: its decode steps run
# the C++ blocks (models/fused_decode.py) whatever this says, as a user's engine does.
os.environ.setdefault("SGRUN_COMPILE", "0")


@pytest.fixture(scope="session")
def model_path():
    from sgrun.models.fetch import default_model_path
    return default_model_path()


@pytest.fixture(scope="session")
def tokenizer(model_path):
    from sgrun.models.loader import load_tokenizer
    return load_tokenizer(str(model_path))


@pytest.fixture(scope="session")
def shared_engine(model_path):
    """The default configuration, as `sgrun.Engine(model)` builds it: the file's int4 weights,
    dtype and kernels as chosen for this CPU at run time, decode steps on the C++ blocks (nothing
    compiled). Most tests run on it, so a defect of what users run (int4, bf16 on AVX512-BF16
    machines, float32 elsewhere) shows in the suite."""
    import sgrun
    engine = sgrun.Engine(str(model_path), num_threads=2, memory_gb=1.0)
    from sgrun.kernels.cpu import matmul
    # Wherever the CPU level has matmul tiles (every x86 with AVX2, every aarch64) the blocks serve.
    assert engine.runner.fused is not None or not matmul.has_tiles(), "the default model's decode should run the C++ blocks"
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def float32_engine(model_path):
    """Dense float32 weights (no quantization), compiled: the reference for tests whose claim is
    exact equality with a float32 forward, where int4 or bf16 rounding would be a different claim
    (greedy equality with transformers' forward in test_engine_reference.py; the baseline that
    test_bf16_accuracy.py and test_quantization.py measure bf16 and int4/int8 drift against).
    Behaviour -- batching, caching, streaming, constraints, the server -- is tested on
    `shared_engine`, the default configuration. Compiled, as dtype auto's float32 path on a CPU
    without native bf16 runs. Its KV cache is float32 too (kv_cache_dtype "auto" would keep bf16
    pages under float32), so nothing in it is rounded."""
    import sgrun
    engine = sgrun.Engine(str(model_path), dtype="float32", num_threads=2, memory_gb=0.5,
                          quantization="none", compile=True, kv_cache_dtype="float32")
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def default_engine(shared_engine):
    """The engine a user gets from `sgrun serve` with no options (int4 weights, dtype auto), for the
    agent modules (tests/test_agent_suite.py, test_agent_clients.py): what they check is what the
    default model does. It is `shared_engine` itself: one default-configuration model in memory."""
    return shared_engine


@pytest.fixture
def engine(shared_engine):
    """The session engine; after each test no request may still hold pages."""
    yield shared_engine
    assert shared_engine.run_on_loop(shared_engine.request_pages) == 0, "a request still holds KV pages"
    assert shared_engine.stats()["running"] == 0


@pytest.fixture(scope="session")
def chat_prompt(tokenizer):
    def render(question: str, system: str | None = None) -> str:
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
        return tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
    return render


@pytest.fixture(scope="session")
def bf16_engine(model_path):
    """A dense bfloat16 engine, asked for explicitly: dtype auto may pick float32 on a CPU
    without native bf16, and these tests are about the bf16 numerics (not quantization's)."""
    import sgrun
    engine = sgrun.Engine(str(model_path), dtype="bfloat16", num_threads=2, memory_gb=0.25, quantization="none")
    yield engine
    engine.close()
