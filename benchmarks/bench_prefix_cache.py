"""Radix prefix cache benchmark: cache on vs off in one run.

    python benchmarks/bench_prefix_cache.py [--dtype bfloat16] [--threads 2] [--plot ttft_vs_prefix.png]

Prints TTFT with a cached 2,000-token prefix vs without, an agent workload (32 requests sharing
a 1,500-token system-plus-tools prefix, 50-150-token questions, 64 output tokens each) with the
cache on vs off, and the tree's own match + insert cost for a 4,000-token prompt. With --plot,
also TTFT against cached prefix length (0-2,048 tokens, each plus 20 new tokens; cache on vs off)
drawn to that file (needs matplotlib: pip install 'sgrun[plot]').
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

import sgrun
from sgrun.engine.state.page_pool import PagePool
from sgrun.engine.state.radix_cache import RadixCache
from bench_options import add_dtype, add_threads, load_avg, machine_line


def ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(100, 40000) for _ in range(n)]


def ttft(engine, prompt) -> float:
    return engine.generate([prompt], sgrun.SamplingParams(max_new_tokens=1, temperature=0))[0].ttft


def bench_ttft(on, off, rng) -> None:
    prefix = ids(rng, 2000)
    on.flush_cache()
    ttft(on, prefix + ids(rng, 20))            # populate the cache
    t_on = statistics.median(ttft(on, prefix + ids(rng, 20)) for _ in range(3))
    t_off = statistics.median(ttft(off, prefix + ids(rng, 20)) for _ in range(3))
    print(f"TTFT, 2,000-token prefix: cached {t_on * 1e3:.1f} ms, cache off {t_off * 1e3:.1f} ms, "
          f"ratio {t_on / t_off:.3f}  (load {load_avg()})")


def bench_ttft_sweep(on, off, rng, lengths=(0, 256, 512, 1024, 1536, 2048)) -> list[dict]:
    rows = []
    for n in lengths:
        prefix = ids(rng, n)
        on.flush_cache()
        ttft(on, prefix + ids(rng, 20))        # populate the cache with this prefix
        t_on = statistics.median(ttft(on, prefix + ids(rng, 20)) for _ in range(3))
        t_off = statistics.median(ttft(off, prefix + ids(rng, 20)) for _ in range(3))
        rows.append({"prefix_tokens": n, "ttft_on_s": t_on, "ttft_off_s": t_off})
        print(f"  prefix {n:5d} tokens: TTFT cached {t_on * 1e3:7.1f} ms, cache off {t_off * 1e3:7.1f} ms  "
              f"(load {load_avg()})")
    return rows


def bench_agents(on, off, rng) -> None:
    prefix = ids(rng, 1500)
    work = [prefix + ids(rng, rng.randint(50, 150)) for _ in range(32)]
    params = sgrun.SamplingParams(max_new_tokens=64, temperature=0, ignore_eos=True)
    times = {}
    for name, eng in (("on", on), ("off", off)):
        eng.flush_cache()
        t = time.perf_counter()
        eng.generate(work, params)
        times[name] = time.perf_counter() - t
    print(f"agent workload (32 x 1,500-token shared prefix): cache on {times['on']:.2f} s, off {times['off']:.2f} s, "
          f"ratio {times['on'] / times['off']:.3f}  (load {load_avg()})")


def bench_tree(rng) -> None:
    pool = PagePool(1, 4096, 16, 1, 1, torch.float32)
    cache = RadixCache(pool)
    for _ in range(50):  # a populated tree with other prompts in it
        if pool.num_free < 300:
            cache.evict(300)
        p = ids(rng, 4000)
        held = pool.alloc(250)
        cache.insert(p, held)
        pool.decref(held)      # the request finished: only the tree holds the pages now
    prompt = ids(rng, 4000)
    cache.evict(300)
    pages = pool.alloc(250)
    samples = []
    for _ in range(20):
        t = time.perf_counter()
        cache.match(prompt)
        node = cache.insert(prompt, pages)
        cache.lock(node)
        cache.unlock(node)
        samples.append(time.perf_counter() - t)
    print(f"tree match + insert, 4,000-token prompt: median {statistics.median(samples) * 1e3:.3f} ms, "
          f"max {max(samples) * 1e3:.3f} ms  (load {load_avg()})")


def main() -> None:
    ap = argparse.ArgumentParser()
    add_dtype(ap, "bfloat16")
    add_threads(ap)
    ap.add_argument("--plot", default=None, metavar="OUT.png", help="also sweep TTFT vs cached prefix length and draw it")
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    if args.plot:
        from sgrun.bench_plot import pyplot_or_error
        pyplot_or_error()  # fail before the run if matplotlib is missing
    dtype = getattr(torch, args.dtype)
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__}, {args.threads} threads, dtype {args.dtype}, load {load_avg()}")
    rng = random.Random(0)
    bench_tree(rng)
    on = sgrun.Engine(dtype=dtype, num_threads=args.threads)
    off = sgrun.Engine(dtype=dtype, num_threads=args.threads, enable_prefix_cache=False)
    bench_ttft(on, off, rng)
    bench_agents(on, off, rng)
    if args.plot:
        from sgrun.bench_plot import plot_prefix_cache
        print("TTFT vs cached prefix length:")
        plot_prefix_cache(bench_ttft_sweep(on, off, rng), args.plot)
        print(f"plot written to {args.plot}")
    on.close()
    off.close()


if __name__ == "__main__":
    main()
