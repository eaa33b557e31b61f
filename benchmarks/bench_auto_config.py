"""The measurements behind `dtype="auto"` / `quantization="auto"` / `kv_cache_dtype="auto"`
(sgrun/models/auto_config.py).

    python benchmarks/bench_auto_config.py [--levels native,avx512_bf16,avx512,avx2] [--threads 2]
                                           [--configs bfloat16:int4,float32:int4,bfloat16:none,float32:none]
                                           [--depth 0]

A config is dtype:quantization[:kv_cache_dtype] (the KV pool's dtype: auto when left out). The
float16 pages auto keeps under float32 were chosen from
`--configs float32:int4:float32,float32:int4:float16,float32:int4:bfloat16 --depth 3000`: decode
after `--depth` tokens of context, where the K/V read outweighs the weights'.

For each CPU level (its own process, forced with bench_options.forced_level_env so sgrun's and
torch's kernels both run at it) and each dtype:quantization, on the default SmolLM2 Q4_1 file:
single-stream decode tok/s (32-token prompt, 64 new tokens, median of --rounds, the configs
interleaved round by round) and TTFT of a 512-token prompt. Eager forwards (compile off): the
compiled graphs cut the same per-op overhead from every configuration. The fastest decode per
level is what AUTO_TABLE should hold; the last column says whether it does.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from bench_options import add_rounds, add_threads, forced_level_env, load_avg, machine_line  # noqa: E402


def measure(args) -> dict:
    import torch

    import sgrun
    from sgrun.models.auto_config import auto_choice, auto_kv_dtype, cpu_level
    torch.set_num_threads(args.threads)
    print(machine_line(args.threads), flush=True)
    rng = random.Random(0)
    prompt = [rng.randrange(100, 40000) for _ in range(32 + args.depth)]
    engines = {}
    for cfg in args.configs.split(","):
        dtype, quant, kv = (cfg.split(":") + ["auto"])[:3]
        engines[cfg] = sgrun.Engine(num_threads=args.threads, dtype=dtype, quantization=quant, compile=False,
                                    memory_gb=0.3, kv_cache_dtype=kv)
    params = sgrun.SamplingParams(max_new_tokens=64, temperature=0, ignore_eos=True)
    decode: dict[str, list[float]] = {k: [] for k in engines}
    for e in engines.values():
        e.generate([prompt], params.replace(max_new_tokens=4))          # warm-up
    for _ in range(args.rounds):
        for k, e in engines.items():
            out = e.generate([prompt], params)[0]
            decode[k].append(63 / (out.finish_time - out.first_token_time))
    ttft = {}
    for k, e in engines.items():
        long = [rng.randrange(100, 40000) for _ in range(512)]
        e.generate([long], sgrun.SamplingParams(max_new_tokens=1, temperature=0))
        e.flush_cache()
        ttft[k] = e.generate([[rng.randrange(100, 40000) for _ in range(512)]],
                             sgrun.SamplingParams(max_new_tokens=1, temperature=0))[0].ttft
        e.close()
    row = auto_choice()
    auto = f"{str(row.dtype).replace('torch.', '')}:{'int4' if row.keep_file_quantization else 'none'}"
    if any(cfg.count(":") == 2 for cfg in engines):   # the pool's dtype is one of the choices compared
        auto += ":" + str(auto_kv_dtype(row.dtype)).replace("torch.", "")
    result = {"level": cpu_level(), "auto": auto, "load": load_avg(),
              "decode_tok_s": {k: statistics.median(v) for k, v in decode.items()}, "ttft512_s": ttft}
    for k in engines:
        print(f"  {result['level']:<12} {k:<16} decode {result['decode_tok_s'][k]:7.1f} tok/s "
              f"(rounds {[round(x, 1) for x in decode[k]]})  TTFT 512 {ttft[k] * 1e3:7.0f} ms  (load {load_avg()})",
              flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    add_threads(ap)
    add_rounds(ap, 3)
    ap.add_argument("--levels", default="native,avx2")
    ap.add_argument("--configs", default="bfloat16:int4,float32:int4,bfloat16:none,float32:none",
                    help="dtype:quantization[:kv_cache_dtype], comma-separated")
    ap.add_argument("--depth", type=int, default=0, help="tokens of context before the decoded ones")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("JSON " + json.dumps(measure(args)), flush=True)
        return
    rows = []
    for level in args.levels.split(","):
        env = forced_level_env(None if level == "native" else level)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, __file__, "--child", "--threads", str(args.threads), "--rounds", str(args.rounds),
               "--configs", args.configs, "--depth", str(args.depth)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
        print("\n".join(ln for ln in out.stdout.splitlines() if not ln.startswith("JSON ")), flush=True)
        got = [json.loads(ln[5:]) for ln in out.stdout.splitlines() if ln.startswith("JSON ")]
        if not got:
            print(f"level {level} failed: {out.stderr[-2000:]}")
            continue
        rows.append(got[0])
    configs = args.configs.split(",")
    print(f"\n| level | {' | '.join(configs)} | fastest | auto picks | auto = fastest? |")
    print(f"|---|{'---|' * len(configs)}---|---|---|")
    for r in rows:
        d = r["decode_tok_s"]
        best = max(d, key=d.get)
        cells = " | ".join(f"{d[c]:.1f} tok/s, TTFT512 {r['ttft512_s'][c]:.2f} s" for c in configs)
        print(f"| {r['level']} | {cells} | {best} | {r['auto']} | {'yes' if best == r['auto'] else 'NO'} |")


if __name__ == "__main__":
    main()
