"""Where a batch-1 decode step's time goes, per thread: the engine thread and the thread team's worker.

    python benchmarks/profile_step_threads.py [--rounds 6] [--tokens 128] [--threads 2] [--no-perf]

It runs `sgrun.Engine()` as a user gets it on one chat prompt (greedy, `--tokens` tokens a
round) and prints, for each round, the step time and how much of it the model's forward took (the
FusedDecode call: on the default model one C++ call, `decode_logits`); the rest is the engine's
Python (schedule, prepare, sampling, postprocess). With perf on PATH (and not --no-perf) it then
attaches `perf record` to itself for the same rounds, after start-up and warm-up, and sorts each
busy thread's samples into: the matmul tiles, the team's end-of-region wait (the caller) or its
spin (the worker), the attention kernels, Python, torch, libc (malloc, free, memset) and the rest
of the kernel modules' code (norms, RoPE, SiLU, activation quantization, checks). That split is
what docs/cpu_kernels.md's accounts of the batch-1 step read. The CPU line comes first; compare
figures within one run (the machine is shared: see its load).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402

from bench_options import add_threads, load_avg, machine_line  # noqa: E402

# (category, test on a perf sample's "symbol (dso)" text), first match wins
CATEGORIES = (
    ("tiles", lambda s: "for_each_tile" in s or "_tile<" in s),
    ("team wait (caller)", lambda s: "Team::run" in s),
    ("team spin (worker)", lambda s: "Team::grow" in s and "_M_run" in s),
    ("attention", lambda s: "sgrun_paged_decode" in s),
    ("python", lambda s: "libpython" in s or "_multiarray" in s or "tokenizers" in s),
    ("torch", lambda s: "libtorch" in s or "libc10" in s),
    ("libc", lambda s: "/libc.so" in s or "libm.so" in s),
    ("kernel modules, rest", lambda s: "sgrun_" in s),
    ("os kernel", lambda s: "kernel.kallsyms" in s),
)


def category(sample: str) -> str:
    return next((name for name, test in CATEGORIES if test(sample)), "other")


def per_thread(perf_data: str) -> dict[str, Counter]:
    """perf script's samples of each thread, counted by category."""
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "tid,ip,sym,dso"], capture_output=True, text=True)
    counts: dict[str, Counter] = defaultdict(Counter)
    for line in out.stdout.splitlines():
        tid, _, rest = line.strip().partition(" ")
        counts[tid][category(rest)] += 1
    return counts


def main() -> None:
    ap = argparse.ArgumentParser()
    add_threads(ap)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--no-perf", action="store_true", help="time the rounds only")
    args = ap.parse_args()

    import torch

    import sgrun
    from sgrun.models import fused_decode
    torch.set_num_threads(args.threads)
    print(machine_line(args.threads), flush=True)
    forward_s: list[float] = []
    plain = fused_decode.FusedDecode.forward

    def timed(self, *a, **k):
        t = time.perf_counter()
        try:
            return plain(self, *a, **k)
        finally:
            forward_s.append(time.perf_counter() - t)

    fused_decode.FusedDecode.forward = timed
    engine = sgrun.Engine(num_threads=args.threads)
    print(f"sgrun: {engine.startup_report()}", flush=True)
    tok = engine.tokenizer
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Write a long story about a dragon."}]))
    params = sgrun.SamplingParams(max_new_tokens=args.tokens, temperature=0, ignore_eos=True)
    for _ in range(2):
        engine.generate([prompt], params)
    perf = None
    data = os.path.join(tempfile.mkdtemp(prefix="sgrun-perf-"), "perf.data")
    if not args.no_perf and shutil.which("perf"):
        perf = subprocess.Popen(["perf", "record", "-F", "4999", "-p", str(os.getpid()), "-o", data],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)   # perf attaches
    steps, forwards = [], []
    for r in range(args.rounds):
        forward_s.clear()
        out = engine.generate([prompt], params)[0]
        step = (out.finish_time - out.first_token_time) / (len(out.token_ids) - 1)
        fwd = statistics.median(forward_s[1:])   # the first is the prefill
        steps.append(step)
        forwards.append(fwd)
        print(f"round {r}: step {step * 1e3:.2f} ms, forward {fwd * 1e3:.2f} ms, engine Python "
              f"{(step - fwd) * 1e3:.2f} ms  (load {load_avg()})", flush=True)
    if perf is not None:
        perf.send_signal(signal.SIGINT)
        perf.wait()
    engine.close()
    step, fwd = statistics.median(steps), statistics.median(forwards)
    print(f"median: step {step * 1e3:.2f} ms ({1 / step:.1f} tok/s), forward {fwd * 1e3:.2f} ms, "
          f"engine Python {(step - fwd) * 1e3:.2f} ms")
    if perf is None:
        print("perf: not run" + ("" if args.no_perf else " (no perf on PATH)"))
        return
    threads = per_thread(data)
    busy = sorted(threads.items(), key=lambda kv: -sum(kv[1].values()))[:args.threads]
    for tid, counts in busy:
        total = sum(counts.values())
        share = ", ".join(f"{name} {100 * n / total:.1f}%" for name, n in counts.most_common())
        print(f"thread {tid} ({total} samples): {share}")


if __name__ == "__main__":
    main()
