"""Batch-1 decode with the streamed weights on 2 MB pages against 4 KB pages (models/huge_pages.py):

    python benchmarks/bench_huge_pages.py [--pairs 4] [--rounds 4] [--tokens 128] [--threads 2]

A page size cannot be undone inside a process, so each side runs in its own fresh process
(`SGRUN_HUGE_PAGES=1` / `=0`), the two alternating pair by pair (which goes first alternates too),
so a shared machine's drift moves both alike. Each process runs `sgrun.Engine()` as a user gets it
and times `--rounds` greedy decodes of `--tokens` tokens after a warm-up; the step is the time
between the first and the last token over the tokens in between. Printed: the CPU line, the
transparent-huge-page mode, what each process's start-up reported for its weights, every round,
the medians and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from bench_options import add_threads, load_avg, machine_line

CHILD = r"""
import json, sys, torch, sgrun
threads, rounds, tokens = (int(x) for x in sys.argv[1:4])
torch.set_num_threads(threads)
engine = sgrun.Engine(num_threads=threads, memory_gb=1.0)
tok = engine.tokenizer
prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Write a long story about a dragon."}]))
params = sgrun.SamplingParams(max_new_tokens=tokens, temperature=0, ignore_eos=True)
steps = []
for r in range(rounds + 1):
    out = engine.generate([prompt], params)[0]
    if r:   # the first is the warm-up
        steps.append((out.finish_time - out.first_token_time) / (len(out.token_ids) - 1) * 1e3)
print("RESULT " + json.dumps({"pages": engine.startup_report().get("weight_pages"), "steps_ms": steps}))
"""


def run_side(huge: bool, args) -> dict:
    env = {**os.environ, "SGRUN_HUGE_PAGES": "1" if huge else "0", "OMP_WAIT_POLICY": "PASSIVE"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(args.threads), str(args.rounds), str(args.tokens)],
                         env=env, capture_output=True, text=True, check=True)
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_threads(ap)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    from sgrun.models.huge_pages import thp_mode
    print(machine_line(args.threads), flush=True)
    print(f"transparent huge pages: {thp_mode()}", flush=True)
    steps: dict[str, list[float]] = {"2 MB pages": [], "4 KB pages": []}
    for p in range(args.pairs):
        order = (True, False) if p % 2 == 0 else (False, True)
        for huge in order:
            got = run_side(huge, args)
            name = "2 MB pages" if huge else "4 KB pages"
            steps[name] += got["steps_ms"]
            print(f"pair {p + 1}, {name}: steps {[round(s, 2) for s in got['steps_ms']]} ms "
                  f"(weights: {got['pages']}; load {load_avg()})", flush=True)
    med = {k: statistics.median(v) for k, v in steps.items()}
    for k, v in med.items():
        print(f"median step, {k}: {v:.2f} ms ({1e3 / v:.1f} tok/s)")
    print(f"4 KB / 2 MB: {med['4 KB pages'] / med['2 MB pages']:.2f}x  (load {load_avg()})")


if __name__ == "__main__":
    main()
