"""End-to-end constrained decoding throughput: the tool-call JSON schema vs unconstrained decoding
of the same requests, with jump-forward off and on.

Method (so the comparison is about the constraint, not about how much text is produced):
- 16 chat requests, greedy, one batch through one engine; the prompts are prefilled once in a
  warm-up, so every measured run finds them in the prefix cache and measures decoding.
- The constraint is compiled and its masks warmed by the warm-up too (a server reuses a tool
  schema across requests; cold first-visit masks are measured by bench_constrain.py).
- Constrained run: output tokens = the tokens each request ends with, jumped ones included.
- Its unconstrained twin: the same prompts with max_new_tokens = that request's constrained
  token count and ignore_eos, so both runs emit exactly the same number of tokens per request
  and the batch shrinks at the same points; only the constraint (and jump-forward) differs.
- Runs are interleaved (constrained, its twin, constrained, ...) `--rounds` times and the
  median throughput of each is reported; ratios are what matters on a shared CPU.

Run: python benchmarks/bench_constrained_decoding.py [--rounds 3] [--requests 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("SGRUN_CACHE", os.path.join(tempfile.gettempdir(), "sgcache"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_constrain import TOOL  # noqa: E402
from bench_options import add_dtype, add_rounds, uptime, machine_line  # noqa: E402

import sgrun  # noqa: E402

ASKS = ["What's the weather in Paris?", "Weather in Tokyo for the next 3 days, metric please.",
        "Search for the best pizza in Naples.", "Calculate 17 times 23.", "Is it raining in London?",
        "Forecast for New York City for a week in imperial units.", "Look up flights to Lisbon.",
        "What's 2 to the power of 10?", "Weather in San Francisco tomorrow, verbose.",
        "Search the news about electric cars.", "How hot is it in Cairo?", "Compute the square root of 144.",
        "Weather for Oslo over 5 days.", "Find a recipe for pancakes.", "Temperature in Sydney in metric.",
        "What is 15% of 80?"]
SYSTEM = ("You call tools by answering with one JSON object: {\"tool\": one of get_weather, search, "
          "calculator, \"city\": text, optional \"days\" (1-14), \"units\" (metric/imperial), \"verbose\".}")


def run(engine, prompts: list[str], params: list[sgrun.SamplingParams]) -> tuple[float, list]:
    t = time.perf_counter()
    outs = engine.generate(prompts, params)
    return time.perf_counter() - t, outs


def main() -> None:
    ap = argparse.ArgumentParser()
    add_rounds(ap)
    ap.add_argument("--requests", type=int, default=16)
    add_dtype(ap, "bfloat16")
    args = ap.parse_args()
    print(machine_line(None), flush=True)
    print("load before:", uptime())
    engine = sgrun.Engine(dtype=args.dtype, num_threads=2)
    tok = engine.tokenizer
    prompts = [tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": a}],
                                       add_generation_prompt=True) for a in (ASKS * 4)[:args.requests]]
    t = time.perf_counter()
    engine.compile_constraint(sgrun.SamplingParams(json_schema=TOOL))
    print(f"schema compile: {(time.perf_counter() - t) * 1e3:.0f} ms")
    results: dict[str, dict] = {}
    for jf in (False, True):
        cparams = sgrun.SamplingParams(max_new_tokens=96, temperature=0.0, json_schema=TOOL, jump_forward=jf)
        warm_s, warm = run(engine, prompts, [cparams] * len(prompts))  # prefills prompts, warms masks
        for o in warm:
            assert o.finish_reason == "stop", o.text
            json.loads(o.text)
        counts = [len(o.token_ids) for o in warm]
        run(engine, prompts, [sgrun.SamplingParams(max_new_tokens=n, temperature=0.0, ignore_eos=True)
                              for n in counts])  # warm-up of the twin
        tps_c, tps_u, total = [], [], []
        calls_c = calls_u = 0
        for _ in range(args.rounds):
            before = engine.stats()["forward_calls"]
            dt_c, outs_c = run(engine, prompts, [cparams] * len(prompts))
            calls_c = engine.stats()["forward_calls"] - before
            # bf16 batches are not bit-reproducible, so the twin copies this run's own lengths
            counts = [len(o.token_ids) for o in outs_c]
            uparams = [sgrun.SamplingParams(max_new_tokens=n, temperature=0.0, ignore_eos=True) for n in counts]
            before = engine.stats()["forward_calls"]
            dt_u, outs_u = run(engine, prompts, uparams)
            calls_u = engine.stats()["forward_calls"] - before
            assert [len(o.token_ids) for o in outs_u] == counts
            assert all(o.finish_reason == "stop" for o in outs_c)
            print(f"  jf={jf}: constrained {dt_c:.2f} s / {calls_c} calls, twin {dt_u:.2f} s / {calls_u} calls, "
                  f"{sum(counts)} tokens", flush=True)
            tps_u.append(sum(counts) / dt_u)
            tps_c.append(sum(counts) / dt_c)
            total.append(sum(counts))
        key = "jump-forward on" if jf else "jump-forward off"
        results[key] = {"tokens": int(statistics.median(total)), "constrained_tps": statistics.median(tps_c),
                        "unconstrained_tps": statistics.median(tps_u), "calls_c": calls_c, "calls_u": calls_u,
                        "first_run_s": warm_s, "sample": warm[0].text}
    print("load after:", uptime())
    print(f"{args.requests} requests, tool-call schema, greedy, dtype {args.dtype}, median of {args.rounds} rounds")
    print("| mode | output tokens | unconstrained tok/s | constrained tok/s | ratio | forward calls (unc. / con.) |")
    print("|---|---|---|---|---|---|")
    for key, r in results.items():
        ratio = r["constrained_tps"] / r["unconstrained_tps"]
        print(f"| {key} | {r['tokens']} | {r['unconstrained_tps']:.1f} | {r['constrained_tps']:.1f} | "
              f"{ratio:.2f}x | {r['calls_u']} / {r['calls_c']} |")
    print("sample output:", results["jump-forward on"]["sample"])
    engine.close()


if __name__ == "__main__":
    main()
