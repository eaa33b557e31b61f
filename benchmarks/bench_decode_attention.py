"""Decode attention that reads the pages in place (attention_backend "cpp") against the gather
path ("torch"), and cascade attention on vs off, side by side in one run.

    python benchmarks/bench_decode_attention.py [--batches 64,32,1] [--context 1024] [--steps 8]
                                                [--agent-requests 32] [--agent-prefix 2048] [--threads 2]
                                                [--dtype auto] [--quantization auto]

One engine (the default SmolLM2 Q4_1 file, dtype and quantization as the engine picks them) holds
the KV pages; both backends attend over that same pool. Once every request of a batch is
decoding, consecutive engine steps alternate between the variants, so a load spike from the
machine's other tenants hits both alike. Per variant it reports the median step time and the
median time spent inside decode attention (`_attend_decodes`, the C++ backend's `_run_decode_kernel`: for the gather path the page
gathers, masks and bmm/softmax; for the kernel the kernel calls and cascade merges), and that
time's share of the step. The load average is printed with every line.

The C++ backend runs twice: "cpp (one call)" is what an engine runs, an all-decode batch's every
layer with its attention in one C++ call (decode_forward), whose attention Python cannot time
(reported as n/a); "cpp (per layer)" turns that call off (`decode_forward_args` -> None), so
the kernel is called, and timed, once per layer: its attention time is the kernel's.

`--against REV` alternates the in-place kernel with the decode kernel of git revision REV
instead of the gather path (same backend, pool and engine; an older kernel runs without cascade).
`--agent-requests 0` skips the agent part. OMP_WAIT_POLICY=PASSIVE unless set (as bench_engine.py).

Batch sizes after the first reuse its prompts from the radix cache (no second prefill).
The agent part: `--agent-requests` requests share a `--agent-prefix`-token system prompt (a
radix-cache hit after the first) and differ in a 32-token user turn; cascade on vs off.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # spinning workers steal the shared cores

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from collections.abc import Callable  # noqa: E402

import torch  # noqa: E402

import sgrun  # noqa: E402
from sgrun.engine.parts.attention.torch_backend import TorchPagedAttention  # noqa: E402
from bench_options import add_dtype, add_quantization, add_threads, load_avg, uptime, machine_line  # noqa: E402


class AlternatingSteps:
    """Wraps engine.step: once a step's forward is all-decode with `batch` rows, each step runs
    under the next variant (round robin) and its wall time and decode-attention time are kept."""

    def __init__(self, engine: sgrun.Engine, variants: dict[str, Callable[[], None]], batch: int):
        self.engine, self.variants, self.batch = engine, variants, batch
        self.names = list(variants)
        self.times: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.attn_time = 0.0
        self.turn = 0
        self.last_batch: tuple[bool, int] = (False, 0)
        runner = engine.runner
        self._orig_run = runner.run

        def run(inputs, *a, **k):
            self.last_batch = (inputs.all_decode, len(inputs.segments))
            return self._orig_run(inputs, *a, **k)

        runner.run = run
        self._orig_step = engine.step
        engine.step = self.step

    def timed(self, fn: Callable) -> Callable:
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.attn_time += time.perf_counter() - t
        return wrapper

    def step(self) -> None:
        steady = self.last_batch == (True, self.batch)   # the previous step was a full decode batch
        name = self.names[self.turn % len(self.names)] if steady else self.names[0]
        self.variants[name]()
        a0, t0 = self.attn_time, time.perf_counter()
        self._orig_step()
        dt = time.perf_counter() - t0
        if steady and self.last_batch == (True, self.batch):
            self.times[name].append((dt, self.attn_time - a0))
            self.turn += 1

    def close(self) -> None:
        del self.engine.step, self.engine.runner.run   # back to the class methods


ONE_CALL, PER_LAYER = "cpp (one call)", "cpp (per layer)"


def report(label: str, times: dict[str, list[tuple[float, float]]]) -> dict[str, tuple[float, float]]:
    out = {}
    for name, rows in times.items():
        step = statistics.median(r[0] for r in rows) * 1e3
        attn = statistics.median(r[1] for r in rows) * 1e3
        out[name] = (step, attn)
        part = ("decode attention     n/a (inside the one C++ call)" if name == ONE_CALL else
                f"decode attention {attn:7.1f} ms ({100 * attn / step:4.1f}% of the step)")
        print(f"  {label:<28} {name:<15} step {step:8.1f} ms   {part}   n={len(rows)}   (load {load_avg()})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="64,32,1")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=8, help="measured steps per variant")
    ap.add_argument("--agent-requests", type=int, default=32)
    ap.add_argument("--agent-prefix", type=int, default=2048)
    ap.add_argument("--against", default="gather",
                    help="what the in-place kernel is alternated with: 'gather' (the torch path) or a git revision "
                         "whose decode kernel is built and run in the same backend (e.g. 5e46349, the kernel "
                         "before chunk folding and AVX512-BF16)")
    add_threads(ap)
    add_dtype(ap, "auto")
    add_quantization(ap, "auto")
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    print(uptime())
    batches = [int(b) for b in args.batches.split(",")]
    max_b = max(batches + [args.agent_requests])
    tokens = max_b * (args.context + 4 * args.steps + 8) + args.agent_requests * (32 + 4 * args.steps) + args.agent_prefix
    from sgrun.engine.parts.device import resolve_device
    from sgrun.models.loader import resolve_dtype
    elem = torch.tensor([], dtype=resolve_dtype(args.dtype, resolve_device("cpu"))).element_size()
    engine = sgrun.Engine(dtype=args.dtype, num_threads=args.threads, max_running=max_b, quantization=args.quantization,
                          memory_gb=1.2 * tokens * kv_bytes_per_token(elem) / 2**30)
    cpp = engine.runner.attn
    assert type(cpp).__name__ == "CppPagedAttention", f"the C++ kernel did not build: {engine.runner.backend}"
    if args.against == "gather":
        other, other_name = TorchPagedAttention(engine.pool, cpp.H, cpp.KV, cpp.D), "torch (gather)"
    else:
        from bench_decode_kernel import build_revision
        from sgrun.engine.parts.attention.cpp_backend import CppPagedAttention
        op = build_revision(args.against)
        other = CppPagedAttention(engine.pool, cpp.H, cpp.KV, cpp.D, op if hasattr(op, "chunk_tokens") else OlderKernel(op),
                                  cascade=False, prefill_op=cpp.prefill_op)
        other_name = f"kernel {args.against}"[:14]
        other.decode_forward_args = lambda dtype: None   # per layer, timed (and the one call reaches only its own kernel)
    print(f"engine: dtype {engine.dtype}, quantization {engine.quantization}, {args.threads} threads, "
          f"page size {engine.pool.page_size}, torch {torch.__version__}")
    rng = random.Random(0)
    prompts = [[rng.randrange(100, 40000) for _ in range(args.context - 8)] for _ in range(max(batches))]

    def use(attn, cascade: bool = True, per_layer: bool = False) -> Callable[[], None]:
        def apply() -> None:
            engine.runner.attn = attn
            cpp.cascade = cascade
            if per_layer:   # no one-call forward: the kernel runs (and is timed) per layer
                cpp.decode_forward_args = lambda dtype: None
            elif "decode_forward_args" in vars(cpp):
                del cpp.decode_forward_args
        return apply

    results = {}
    for batch in batches:
        # Requests admitted first decode while later ones still prefill: they must not finish
        # before the whole batch is decoding (one prefill chunk of max_batch_tokens per step).
        steps = 2 * args.steps + 4 + batch * args.context // engine.scheduler.max_batch_tokens
        alt = AlternatingSteps(engine, {ONE_CALL: use(cpp), PER_LAYER: use(cpp, per_layer=True),
                                        other_name: use(other)}, batch)
        cpp._run_decode_kernel = alt.timed(cpp._run_decode_kernel)   # the all-decode fast path skips _attend_decodes
        other._attend_decodes = alt.timed(other._attend_decodes)
        try:
            t = time.perf_counter()
            engine.generate(prompts[:batch], sgrun.SamplingParams(max_new_tokens=steps, temperature=0, ignore_eos=True))
            print(f"batch {batch} x ~{args.context} tokens: {time.perf_counter() - t:.1f} s incl. prefill")
            results[batch] = report(f"batch {batch} x {args.context}", alt.times)
        finally:
            alt.close()
            use(cpp)()
            del cpp._run_decode_kernel, other._attend_decodes

    agent = None
    if args.agent_requests > 0:
        agent = agent_part(engine, cpp, use, rng, args)
    engine.close()

    print(f"\nsummary (medians; ratios from steps alternated in this run; {other_name} -> cpp)")
    for batch, r in results.items():
        (cs, _), (ls, la), (ts, ta) = r[ONE_CALL], r[PER_LAYER], r[other_name]
        print(f"  batch {batch:>3} x {args.context}: step {ts:.1f} -> {cs:.1f} ms one call ({ts / cs:.2f}x), "
              f"{ls:.1f} ms per layer; attention {ta:.1f} -> {la:.1f} ms per layer ({ta / max(la, 1e-9):.1f}x); "
              f"share {100 * ta / ts:.1f}% -> {100 * la / ls:.1f}%")
    if agent is not None:
        (ons, ona), (offs, offa) = agent["cascade on"], agent["cascade off"]
        print(f"  agent: step {offs:.1f} -> {ons:.1f} ms ({offs / ons:.2f}x); attention {offa:.1f} -> {ona:.1f} ms "
              f"({offa / max(ona, 1e-9):.2f}x) with cascade on")
    print(uptime())


class OlderKernel:
    """A kernel from before chunk folding (its paged_decode returns (out, lse)) behind today's call.
    It never runs a cascade: its prefix contract differs (chunk_tokens is beyond any context)."""

    def __init__(self, op):
        self.op = op

    def chunk_tokens(self) -> int:
        return 1 << 40

    def paged_decode(self, q, k_cache, v_cache, table, lens, starts, scale, out, lse) -> None:
        o, l_ = self.op.paged_decode(q, k_cache, v_cache, table, lens, scale)
        out.copy_(o.view_as(out))
        lse.copy_(l_.view_as(lse))


def agent_part(engine, cpp, use, rng, args) -> dict:
    """Requests sharing a long system prompt (a radix-cache hit after the first): cascade on vs off."""
    system = [rng.randrange(100, 40000) for _ in range(args.agent_prefix)]
    engine.generate([system + [7]], sgrun.SamplingParams(max_new_tokens=1))   # the system prompt into the cache
    agents = [system + [rng.randrange(100, 40000) for _ in range(32)] for _ in range(args.agent_requests)]
    alt = AlternatingSteps(engine, {"cascade on": use(cpp, True, per_layer=True),
                                    "cascade off": use(cpp, False, per_layer=True)}, args.agent_requests)
    cpp._run_decode_kernel = alt.timed(cpp._run_decode_kernel)   # the all-decode fast path skips _attend_decodes
    try:
        steps0 = cpp.cascade_steps
        engine.generate(agents, sgrun.SamplingParams(max_new_tokens=2 * args.steps + 4, temperature=0, ignore_eos=True))
        print(f"agent: {args.agent_requests} requests sharing a {args.agent_prefix}-token system prompt "
              f"(cascade used in {cpp.cascade_steps - steps0} prepared batches)")
        return report(f"agent {args.agent_requests} x {args.agent_prefix}+32", alt.times)
    finally:
        alt.close()
        use(cpp)()
        del cpp._run_decode_kernel


def kv_bytes_per_token(elem: int) -> int:
    """KV bytes per token of the default model (SmolLM2-135M's shapes)."""
    from sgrun.models.random_model import PRESETS
    c = PRESETS["smollm2-135m"]
    return 2 * c["num_layers"] * c["num_kv_heads"] * c["head_dim"] * elem


if __name__ == "__main__":
    main()
