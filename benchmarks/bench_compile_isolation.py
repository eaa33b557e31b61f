"""Does a hostile compile on another thread slow the engine loop down? (issue 9 item 3)

An "engine-like" thread runs steps of small torch ops (each op releases and re-takes the GIL, as
the engine loop's do) and records each step's latency, first alone, then while another thread
compiles a constraint that runs into its compile budget. Modes for the compiling thread:
  plain      - no mitigation
  yield      - the compile budget's periodic time.sleep(0)
  switch     - sys.setswitchinterval lowered while a compile runs (what compile_constraint does)
  isolate    - compile_constraint(isolate=True): the automaton is built in a worker process
               (sgrun.constrain.compile_worker), the thread just waits on it
Prints p50 / p99 step latency and the ratio to the alone run, measured side by side.

Usage: python benchmarks/bench_compile_isolation.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

import torch

from bench_options import uptime, machine_line

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

# Runs into the time budget: a big unanchored pattern intersected with length bounds (eager DFAs).
HOSTILE = {"type": "string", "pattern": "(a|b)*a(a|b){12}c", "minLength": 3, "maxLength": 3000}


def engine_steps(stop: threading.Event, out: list[float], n_ops: int = 40) -> None:
    x = torch.randn(64, 64)
    while not stop.is_set():
        t = time.perf_counter()
        for _ in range(n_ops):
            x = torch.tanh(x @ x.T * 0.01)
        out.append(time.perf_counter() - t)


def hostile_compile(tok, policy: str, seconds: float, isolate: bool = False) -> str:
    """Hostile compiles back to back for `seconds` (each ends with a refusal)."""
    from sgrun.constrain import compile_budget, compile_constraint
    from sgrun.errors import ConstraintError
    compile_budget.GIL_POLICY = policy
    end = time.perf_counter() + seconds
    results = []
    while time.perf_counter() < end:
        try:
            compile_constraint(tok, json_schema=HOSTILE, use_cache=False, warm_up=False,
                               budget_s=max(0.05, end - time.perf_counter()), isolate=isolate)
            results.append("compiled")
        except ConstraintError as e:
            results.append(type(e).__name__)
    return f"{len(results)}x {results[-1]}"


def measure(mode: str, tok, seconds: float) -> tuple[list[float], str, float]:
    stop = threading.Event()
    lat: list[float] = []
    eng = threading.Thread(target=engine_steps, args=(stop, lat))
    eng.start()
    t0 = time.perf_counter()
    result = "alone"
    if mode == "alone":
        time.sleep(seconds)
    elif mode == "isolate":
        result = hostile_compile(tok, "none", seconds, isolate=True)
    else:
        result = hostile_compile(tok, {"plain": "none"}.get(mode, mode), seconds)
    stop.set()
    eng.join()
    return lat, result, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    print(machine_line(None), flush=True)
    torch.set_num_threads(1)
    from constrain_fixtures import load_default_tokenizer
    from sgrun.constrain.token_table import token_table
    tok = load_default_tokenizer()
    token_table(tok)
    print("load:", uptime())
    from sgrun.constrain.compile_worker import start_workers
    start_workers()
    if True:
        rows = []
        for mode in ("alone", "plain", "yield", "switch", "isolate", "alone"):
            lat, result, window = measure(mode, tok, args.seconds)
            lat.sort()
            rows.append((mode, statistics.median(lat) * 1e3, lat[int(len(lat) * 0.99)] * 1e3, window / len(lat) * 1e3,
                         result))
    base = statistics.mean([r[1] for r in rows if r[0] == "alone"])
    mean_alone = statistics.mean([r[3] for r in rows if r[0] == "alone"])
    print(f"{'mode':8} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'p50/alone':>10} {'mean/alone':>11}  compiles")
    for mode, p50, p99, mean, result in rows:
        print(f"{mode:8} {p50:8.2f} {p99:8.2f} {mean:8.2f} {p50 / base:10.2f} {mean / mean_alone:11.2f}  {result}")
    print("load:", uptime())


if __name__ == "__main__":
    main()
