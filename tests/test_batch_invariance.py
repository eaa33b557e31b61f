"""Batch invariance of the default CPU engine, in the method of vLLM's
tests/v1/determinism/test_batch_invariance.py: a "needle" request is generated greedily alone,
then placed at a random position among 8 and among 24 other requests of random lengths, then
again with its prompt's prefix already in the radix cache; its tokens and the logprob of every
token it generated must be bitwise the same each time (docs/determinism.md).

Every architecture of the model family (a tiny random-weight model per architecture, built by
transformers and written as a Q4_0 GGUF as llama.cpp's converter writes it: tests/model_family.py),
at the native level and at avx2 forced (each level in a fresh process, as the level is fixed when
the linears are built), and the real SmolLM2 file (slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sgrun.kernels.cpu import isa

ROOT = Path(__file__).resolve().parent.parent

# Run in a fresh process at the level SGRUN_CPU_ISA names: prints one RESULT line per model.
_RUN = r"""
import json, random, sys
import sgrun
for path in sys.argv[1:]:
    engine = sgrun.Engine(path, dtype="float32", quantization="int4", num_threads=2, memory_gb=0.25, compile=False)
    vocab = engine.parts.tokenizer.vocab_size if hasattr(engine.parts.tokenizer, "vocab_size") else 4000
    rng = random.Random(0)
    def prompt(n):
        return [rng.randrange(300, min(vocab, 40000) - 1) for _ in range(n)]
    needle = prompt(40)
    greedy = sgrun.SamplingParams(max_new_tokens=12, temperature=0, ignore_eos=True, logprobs=1)
    def run(batch):
        outs = engine.generate(batch, greedy)
        return [(o.outputs[0].token_ids, [lp.logprob.hex() for lp in o.outputs[0].logprobs]) for o in outs]
    engine.flush_cache()
    alone = run([needle])[0]
    results = {"alone": alone, "fused": engine.parts.fused is not None}
    for others in (8, 24):
        engine.flush_cache()
        batch = [prompt(rng.randint(5, 120)) for _ in range(others)]
        at = rng.randrange(others + 1)
        batch.insert(at, needle)
        results[f"batch{others}"] = run(batch)[at]
    # The needle's first 32 tokens cached by another request, then the needle in a batch of 8.
    engine.flush_cache()
    run([needle[:32] + prompt(10)])
    batch = [prompt(rng.randint(5, 120)) for _ in range(8)]
    batch.insert(3, needle)
    results["cached_prefix"] = run(batch)[3]
    print("RESULT " + json.dumps({"path": path, **results}), flush=True)
    engine.close()
"""


def _run_at(level: str | None, paths: list[str]) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != isa.ENV}
    if level is not None:
        env[isa.ENV] = level
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    run = subprocess.run([sys.executable, "-c", _RUN, *paths], env=env, capture_output=True, text=True, timeout=1500,
                         cwd=ROOT)
    assert run.returncode == 0, run.stderr[-4000:]
    return [json.loads(line[len("RESULT "):]) for line in run.stdout.splitlines() if line.startswith("RESULT ")]


def _check(results: list[dict]) -> None:
    for r in results:
        assert r["fused"], f"{r['path']}: the C++ decode blocks did not serve this model"
        tokens, logprobs = r["alone"]
        assert len(tokens) == 12 and len(logprobs) == 12
        for case in ("batch8", "batch24", "cached_prefix"):
            assert r[case][0] == tokens, (r["path"], case, "tokens differ")
            assert r[case][1] == logprobs, (r["path"], case, "logprobs differ")


@pytest.fixture(scope="module")
def family_files(tmp_path_factory, model_path):
    """A Q4_0 GGUF of every architecture of the family (tiny, random weights; the default model's tokenizer)."""
    import gguf
    import model_family
    from sgrun.models.gguf_file import GGUFFile

    tok_meta = GGUFFile(model_path).metadata
    folder = tmp_path_factory.mktemp("family")
    paths = []
    for arch in model_family.ARCHS:
        path = folder / f"{arch}.gguf"
        model_family.write_gguf(arch, model_family.tiny_model(arch), path, gguf.GGMLQuantizationType.Q4_0,
                                tok_meta)
        paths.append(str(path))
    return paths


LEVELS = [None] + (["avx2"] if isa.machine_arch() == "x86_64" else [])


# Native in the default run (~2.5 min on a loaded 2-core machine, ~9 engines); avx2 slow-marked.
_FAMILY_LEVELS = [pytest.param(lv, marks=pytest.mark.slow) if lv else lv for lv in LEVELS]


@pytest.mark.parametrize("level", _FAMILY_LEVELS, ids=[lv or "native" for lv in LEVELS])
def test_every_architecture_is_batch_invariant(family_files, level):
    _check(_run_at(level, family_files))


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS, ids=[lv or "native" for lv in LEVELS])
def test_the_default_model_is_batch_invariant(model_path, level):
    _check(_run_at(level, [str(model_path)]))
