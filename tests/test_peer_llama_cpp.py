"""The benchmarks' llama.cpp peer (benchmarks/peer_llama_cpp.py) over several builds: every test
runs on each build, the fastest counts, and a build killed by a signal (llama.cpp's AMX prefill
on an Intel Xeon: SIGILL, SIGSEGV) is reported and skipped, never counted and never fatal unless every
build died. The builds here are small scripts standing in for llama-bench: what is tested is the
choosing, not llama.cpp."""

from __future__ import annotations

import os
import signal
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import peer_llama_cpp  # noqa: E402


def fake_build(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def answers(tok_s: float) -> str:
    return f"echo '[{{\"avg_ts\": {tok_s}}}]'"


ILLEGAL = "kill -ILL $$"


def test_the_fastest_build_counts_and_a_crashing_one_is_skipped(tmp_path, monkeypatch):
    slow = fake_build(tmp_path, "slow", answers(80.0))
    fast = fake_build(tmp_path, "fast", answers(140.0))
    amx = fake_build(tmp_path, "amx", ILLEGAL)
    monkeypatch.setenv("SGRUN_LLAMA_BENCH", os.pathsep.join([amx, slow, fast]))
    assert peer_llama_cpp.binaries("llama-bench") == [amx, slow, fast]
    got = peer_llama_cpp.bench(tmp_path / "model.gguf", 2, prompt=2048, reps=1)
    assert got == 140.0
    assert peer_llama_cpp.last_by_build == {slow: 80.0, fast: 140.0}
    assert set(peer_llama_cpp.last_by_policy) == set(peer_llama_cpp.WAIT_POLICIES)
    assert peer_llama_cpp.crashed == {amx: "killed by SIGILL"}


def test_a_build_killed_by_another_signal_is_skipped_too(tmp_path, monkeypatch):
    segv = fake_build(tmp_path, "segv", "kill -SEGV $$")
    fast = fake_build(tmp_path, "fast", answers(140.0))
    monkeypatch.setenv("SGRUN_LLAMA_BENCH", os.pathsep.join([segv, fast]))
    assert peer_llama_cpp.bench(tmp_path / "model.gguf", 2, gen=128, depth=1000, reps=1) == 140.0
    assert peer_llama_cpp.crashed == {segv: "killed by SIGSEGV"}
    assert peer_llama_cpp.signal_of(139) == signal.SIGSEGV and peer_llama_cpp.signal_of(1) is None


def test_every_build_crashing_is_an_error_that_names_them(tmp_path, monkeypatch):
    amx = fake_build(tmp_path, "amx", ILLEGAL)
    monkeypatch.setenv("SGRUN_LLAMA_BENCH", amx)
    with pytest.raises(RuntimeError, match="every llama-bench build crashed"):
        peer_llama_cpp.bench(tmp_path / "model.gguf", 2, gen=128, reps=1)


def test_a_build_failing_otherwise_is_not_skipped(tmp_path, monkeypatch):
    broken = fake_build(tmp_path, "broken", "echo 'no such model' >&2; exit 1")
    fast = fake_build(tmp_path, "fast", answers(140.0))
    monkeypatch.setenv("SGRUN_LLAMA_BENCH", os.pathsep.join([fast, broken]))
    with pytest.raises(RuntimeError, match="no such model"):
        peer_llama_cpp.bench(tmp_path / "model.gguf", 2, gen=128, reps=1)


def test_without_an_override_the_one_build_found_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("SGRUN_LLAMA_BENCH", raising=False)
    fake_build(tmp_path, "llama-bench", answers(99.0))
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ["PATH"])
    assert peer_llama_cpp.binaries("llama-bench") == [str(tmp_path / "llama-bench")]
    assert peer_llama_cpp.bench(tmp_path / "model.gguf", 2, gen=128, reps=1) == 99.0


def test_best_setting_pins_the_fastest_build_and_the_rounds_run_only_it(tmp_path, monkeypatch):
    slow = fake_build(tmp_path, "slow", answers(80.0))
    counted = tmp_path / "fast_runs"
    fast = fake_build(tmp_path, "fast", f"echo run >> {counted}; " + answers(140.0))
    monkeypatch.setenv("SGRUN_LLAMA_BENCH", os.pathsep.join([slow, fast]))
    peer_llama_cpp.bench(tmp_path / "model.gguf", 2, gen=128, reps=1)
    setting = peer_llama_cpp.best_setting()
    assert setting["builds"] == (fast,) and len(setting["policies"]) == 1
    assert "by build" in peer_llama_cpp.builds_note()
    runs_before = len(counted.read_text().splitlines())
    assert peer_llama_cpp.bench(tmp_path / "model.gguf", 2, gen=128, reps=1, **setting) == 140.0
    assert peer_llama_cpp.last_by_build == {fast: 140.0}
    assert len(counted.read_text().splitlines()) == runs_before + 1
    assert peer_llama_cpp.builds_note() == ""   # one build ran: nothing to say which
