"""Start-up time: a first start on a fresh cache folder, then later starts on the warm one.

    python benchmarks/bench_startup.py [--threads 2] [--later 2] [--level avx2] [--keep DIR]

Each start is a new process (nothing carries over in memory), with $SGRUN_CACHE pointing at one
folder that starts empty except for the model file (copied in, so the download is not timed):
the first start builds the C++ kernels, the packed model (model_cache.py) and, where the
compile policy wants them, the compiled graphs in the background; later starts reuse all three.
(Where the C++ decode blocks serve the model, the default on every CPU level with matmul tiles,
the policy compiles nothing and `compiled` reads "never".) For each start it prints:

- `engine`: seconds from process start until `sgrun.Engine()` returns (import torch included);
- `first token`: until the first token of a short greedy request (the engine is usable);
- `compiled`: until the background compile is in use (later starts: inductor's caches warm);
- `generate`: the whole `sgrun generate "..." --max-tokens 16` command, as a user runs it once.

Targets (issue 26): first start <= 60 s on 2 cores including kernel builds, later starts <= 5 s.
`--level` runs every start at a lower CPU level (bench_options.forced_level_env).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_options import add_threads, forced_level_env, load_avg, machine_line

REPO = Path(__file__).resolve().parent.parent

# One start, in a child process: the times are from the child's own start (the interpreter's
# start-up excluded, which is the same for every Python program).
CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import sgrun
e = sgrun.Engine(num_threads=int(sys.argv[1]))
engine_s = time.perf_counter() - t0
e.generate(["Hello"], sgrun.SamplingParams(max_new_tokens=1, temperature=0))
first_s = time.perf_counter() - t0
while e.parts.compiled is not None and not e.parts.compiled.ready and time.perf_counter() - t0 < 600:
    time.sleep(0.05)
compiled_s = time.perf_counter() - t0 if e.parts.compiled is not None and e.parts.compiled.ready else None
line = e.startup_report()
e.close()
print("RESULT " + json.dumps({"engine_s": engine_s, "first_token_s": first_s, "compiled_s": compiled_s,
                              "report": {k: v for k, v in line.items() if isinstance(v, (str, bool, int, float))}}))
"""


def run_start(env: dict, threads: int) -> dict:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(threads)], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=1200)
    wall = time.perf_counter() - t
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"start failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(lines[-1][len("RESULT "):])
    out["process_s"] = wall
    return out


def run_generate(env: dict, threads: int) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sgrun.cli", "generate", "Name three colours.", "--max-tokens", "16",
                           "--temperature", "0", "--num-threads", str(threads)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise SystemExit(f"sgrun generate failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    add_threads(ap)
    ap.add_argument("--later", type=int, default=2, help="later starts measured after the first")
    ap.add_argument("--level", default=None, help="force a lower CPU level (avx2, avx512, avx512_bf16)")
    ap.add_argument("--keep", default=None, metavar="DIR", help="use (and keep) DIR as the fresh cache folder")
    args = ap.parse_args()
    from sgrun.models.fetch import default_model_path
    model = default_model_path()
    env = forced_level_env(args.level)
    print(machine_line(args.threads, env))
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sgrun-startup-"))
    if folder.exists() and any(folder.iterdir()):
        raise SystemExit(f"{folder} is not empty: a first start needs a fresh cache folder")
    (folder / "models").mkdir(parents=True, exist_ok=True)
    shutil.copy(model, folder / "models" / model.name)
    env.update(SGRUN_CACHE=str(folder), PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
               OMP_WAIT_POLICY=env.get("OMP_WAIT_POLICY", "PASSIVE"))
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)   # the fresh folder's (compile_policy.py)
    env.pop("SGRUN_COMPILE", None)             # the default: compile in the background
    try:
        rows = []
        for i in range(1 + args.later):
            r = run_start(env, args.threads)
            r["which"] = "first start (fresh cache)" if i == 0 else f"later start {i}"
            rows.append(r)
            compiled = f"{r['compiled_s']:.1f} s" if r["compiled_s"] is not None else "never"
            print(f"{r['which']:<27} engine {r['engine_s']:6.1f} s   first token {r['first_token_s']:6.1f} s   "
                  f"compiled {compiled:>8}   (load {load_avg()})", flush=True)
        print(f"  what ran: {rows[-1]['report']}")
        gen = run_generate(env, args.threads)
        print(f"sgrun generate, 16 tokens, warm cache: whole command {gen:.1f} s  (load {load_avg()})")
        first, later = rows[0]["first_token_s"], max(r["first_token_s"] for r in rows[1:]) if rows[1:] else None
        print(f"targets: first start {first:.1f} s (<= 60: {'met' if first <= 60 else 'MISSED'})"
              + (f", later starts {later:.1f} s (<= 5: {'met' if later <= 5 else 'MISSED'})" if later else ""))
        # For bench_targets.py, which runs this file as a child.
        print("JSON " + json.dumps({"first_start_s": first, "later_start_s": later, "generate_s": gen}))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
