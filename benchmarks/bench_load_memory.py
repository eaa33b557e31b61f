"""Peak memory of loading a model file, beside the file's size.

Each file loads in a fresh child process (`load_model`, the engine's own entry point, with the
default dtype and quantization and the built-model cache off, so the file is really read,
dequantized and packed); the child reports its peak resident set (getrusage's ru_maxrss, which
counts the file's mapped pages it touched too) before and after the load. The table prints the
peak, the growth over the bare interpreter (torch and sgrun imported), both over the file size, and
the load's wall time. Memory targets live here, not in timed tests: a Q4 model should load in
about its packed size plus one tensor's working copy, not four bytes a parameter.

    python benchmarks/bench_load_memory.py FILE.gguf [FILE.gguf ...]
    python benchmarks/bench_load_memory.py --bench-models     # every Q4 file bench_models.py built
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench_options import add_json_output, load_avg, machine_line, write_json

# The child: import, note the interpreter's peak, load, note the peak again (kilobytes on Linux).
_CHILD = r"""
import json, resource, sys, time
import torch
from sgrun.models.loader import load_model, resolve_dtype
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
model, _, _ = load_model(sys.argv[1], resolve_dtype("auto", torch.device("cpu")), "auto", "cpu")
seconds = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"base_kb": base, "peak_kb": peak, "seconds": seconds, "quantization": model.quantization,
                  "dtype": str(model.dtype).replace("torch.", "")}), flush=True)
"""


def bench_model_files() -> list[Path]:
    from sgrun.models.fetch import cache_dir
    return sorted((cache_dir() / "bench_models").glob("*/*Q4_*.gguf"))


def measure(path: Path) -> dict:
    # This checkout's sgrun in the child, whatever the interpreter has installed.
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, SGRUN_MODEL_CACHE="0", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], env=env, capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        why = "killed (out of memory?)" if out.returncode in (-9, 137) else f"exit {out.returncode}"
        return {"file": path.name, "size": path.stat().st_size, "error": why, "stderr": out.stderr[-400:]}
    return {"file": path.name, "size": path.stat().st_size, **json.loads(lines[-1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--bench-models", action="store_true", help="every Q4 GGUF under the cache's bench_models/")
    add_json_output(ap)
    args = ap.parse_args()
    files = list(args.files) + (bench_model_files() if args.bench_models else [])
    if not files:
        ap.error("name GGUF files, or --bench-models")
    print(machine_line())
    gib = 1 << 30
    print(f"{'file':34s} {'size GiB':>8s} {'peak GiB':>8s} {'peak/size':>9s} {'load GiB':>8s} {'load/size':>9s} "
          f"{'seconds':>7s}  linears")
    results = []
    for path in files:
        r = measure(path)
        results.append(r)
        size = r["size"] / gib
        if "error" in r:
            print(f"{r['file']:34s} {size:8.2f} {r['error']}", flush=True)
            continue
        peak, grown = r["peak_kb"] / (1 << 20), (r["peak_kb"] - r["base_kb"]) / (1 << 20)
        print(f"{r['file']:34s} {size:8.2f} {peak:8.2f} {peak / size:9.2f} {grown:8.2f} {grown / size:9.2f} "
              f"{r['seconds']:7.1f}  {r['quantization']} {r['dtype']}", flush=True)
    print(f"load after: {load_avg()}")
    write_json(args.json_out, results)


if __name__ == "__main__":
    main()
