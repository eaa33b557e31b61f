"""The prepared GPU check itself runs end to end: `--smoke` on tiny shapes on the CPU, the
Triton kernels interpreted (the real run needs a CUDA device; see docs/gpu.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"


@pytest.mark.slow
def test_gpu_check_smoke_runs_every_step(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1", "OUT": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke"], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "gpu_check.json").read_text())
    assert res["equality"]["greedy_equal_prompts"] == res["equality"]["greedy_prompts"] == 8
    assert res["kernels"]["kernel_cases_passed"] > 0
    assert res["throughput"]["decode_tok_s_b1"] > 0 and "hf_decode_tok_s_b1" in res["peer"]


@pytest.mark.gpu
def test_gpu_check_on_cuda(tmp_path):
    import torch
    assert torch.cuda.is_available(), "the gpu marker needs a CUDA device"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"OUT": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
