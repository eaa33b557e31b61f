"""The real default model (SmolLM2 Q4_1, int4) end to end at the AVX2 level, forced on whatever
x86 machine runs the tests (SGRUN_CPU_ISA=avx2, in a fresh process: the level is fixed when the
linears are built): its greedy tokens agree with torch's fallback kernels (SGRUN_CPU_ISA=scalar,
where sgrun has no matmul tiles) on the first tokens of every prompt, up to a position where the
fallback's top two candidates are a near tie (8-bit activations move logprobs by up to a few
tenths), and speculative decoding gives exactly the tokens of plain decoding, because the AVX2
kernels compute a row alike at any row count. Float32 activations, the dtype such CPUs run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sgrun.kernels.cpu import isa

ROOT = Path(__file__).resolve().parents[1]

_RUN = """
import json, sgrun
engine = sgrun.Engine(dtype="float32", quantization="int4", num_threads=2, memory_gb=0.5, compile=False,
                      enable_prefix_cache=False)
prompts = ["The capital of France is", "def fibonacci(n):\\n    ",
           "Repeat exactly: alpha beta gamma delta epsilon zeta eta theta. Repeat exactly: alpha beta gamma"]
out = {}
for spec in (False, True):
    params = sgrun.SamplingParams(max_new_tokens=16, temperature=0, ignore_eos=True, speculative_ngram=spec)
    out[str(spec)] = [o.outputs[0].token_ids for o in engine.generate(prompts, params)]
first = engine.generate(prompts, sgrun.SamplingParams(max_new_tokens=4, temperature=0, ignore_eos=True, logprobs=5))
out["first"] = [o.outputs[0].token_ids for o in first]
out["top5"] = [[{str(t[0]): t[2] for t in lp.top} for lp in o.outputs[0].logprobs] for o in first]
model = engine.runner.model
layer = model.layers[0]
out["sgrun_kernels"] = [bool(getattr(lin, "cpp", False)) for lin in (layer.qkv, layer.o, layer.gate_up, layer.down,
                                                                    model.lm_head)]
print("RESULT " + json.dumps(out))
engine.close()
"""


def _greedy(level: str) -> dict:
    env = {**os.environ, isa.ENV: level, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(x for x in run.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.skipif(isa.machine_arch() != "x86_64", reason="the AVX2 level exists on x86-64 only")
def test_avx2_greedy_matches_torch_fallback_and_speculation_is_exact():
    avx2, fallback = _greedy("avx2"), _greedy("scalar")
    assert all(avx2["sgrun_kernels"]) and not any(fallback["sgrun_kernels"])   # the paths compared are the ones named
    assert avx2["True"] == avx2["False"], "speculative greedy differs from plain greedy at avx2"
    for ours, torchs, tops_ours, tops_torch in zip(avx2["first"], fallback["first"], avx2["top5"], fallback["top5"]):
        # The first token's distribution stays close: 8-bit activations through 30 layers moved a top
        # logprob by 0.33 (-2.35 vs -2.68) on these prompts, and by 0.52 while the int4 minimum's term
        # took the exact activation sum (fixed: matmul_common.cpp); how the drift compares with
        # llama.cpp's is the accuracy benchmark's question (benchmarks/bench_drift.py), not this test's.
        for tok in set(tops_ours[0]) & set(tops_torch[0]):
            assert abs(tops_ours[0][tok] - tops_torch[0][tok]) < 0.5, (tok, tops_ours[0], tops_torch[0])
        # The same greedy tokens, position by position, until one differs, which is allowed only where
        # the fallback has a near tie (the quantized activations turn any change of the float math, an
        # attention kernel's included, into logprob moves of a few tenths) and each side's pick is in
        # the other's top 5; the continuations, on different prefixes, are not compared.
        for i, (top_ours, top_torch) in enumerate(zip(tops_ours, tops_torch)):
            if ours[i] == torchs[i]:
                continue
            best = sorted(top_torch.values(), reverse=True)
            assert best[0] - best[1] <= 0.3, (i, ours, torchs, top_torch)
            assert str(ours[i]) in top_torch and str(torchs[i]) in top_ours, (i, ours, torchs, top_ours, top_torch)
            break
