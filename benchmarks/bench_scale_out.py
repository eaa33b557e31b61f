"""Data parallelism through SGLang's gateway: prefix-cache hit rate and throughput of a
multi-agent workload through `sgrun serve --dp N` (N sgrun replicas behind smg), for smg's
cache_aware policy against its round_robin and against one replica.

Workload: --agents agents, each with its own system prompt of --prefix-words words (1,400: about
1,500 tokens), --turns turns each (every turn re-sends the whole conversation, as agents do). The
agents run interleaved: a pool of --concurrency clients takes whichever agent is ready next, in a
seeded random order.

`sgrun serve --dp 2` passes smg the settings sgrun chooses (gateway.DEFAULT_SMG_ARGS, printed
at the top; docs/scale-out.md says why each), the same for both policies; --gateway-arg adds to
or overrides them. Each replica's KV pool is --replica-tokens tokens (default 8,000: room for about 4 of the 8
prefixes plus working space), so where the requests land decides what stays cached. DP=1 gets
twice that, the same total cache as two replicas. Size it so that half the agents' whole
conversations fit in one replica (with --prefix-words 500, about 750 tokens each by the 4th
turn: 3,600), else every configuration thrashes its LRU cache by the last turn. The default
model and dtype, as `sgrun serve` runs them (the KV cache in bfloat16); the replicas' real
capacity is printed from /server_info, and the hit rate of each turn and the tokens each replica
took show where the requests landed.

    python benchmarks/bench_scale_out.py                 # all three configurations
    python benchmarks/bench_scale_out.py --prefix-words 500 --replica-tokens 3600 --max-tokens 16   # a short run
    python benchmarks/bench_scale_out.py --json out.json
    python benchmarks/bench_scale_out.py --configs tp2   # tensor parallelism's communication only

Needs smg: pip install "sgrun[gateway]".

Hit rate = sum of usage.prompt_tokens_details.cached_tokens / sum of prompt_tokens.

`tp2-wire` times the step-metadata transport alone, in the same run for both ways: two gloo
processes pass a decode batch's metadata (--tp-batch sequences, --wire-ctx tokens of context each,
16-token pages) pickled through broadcast_object_list (the old way) and as sgrun's two tensor
broadcasts (sgrun/engine/parts/step_broadcast.py), alternating, each timed until the worker holds it.

`tp2` is not a server run: one TP=2 engine in this process (SmolLM2 float32, gloo on the CPU, one
thread a rank) decodes --tp-batch greedy requests of --tp-tokens tokens, and prints rank 0's
communication per forward from engine.stats(): the step-metadata broadcast and the all-reduces.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import time

import httpx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from sgrun.child_process import free_port  # noqa: E402
from bench_options import add_json_output, add_threads, server_log_path, write_json, machine_line  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
WORDS = ("cargo manifest vessel harbour customs invoice pallet freight route tariff container crane berth "
         "schedule inspection warehouse dock ledger shipment courier").split()
KV_BYTES_PER_TOKEN = 30 * 2 * 3 * 64 * 2     # SmolLM2-135M: layers x (K,V) x kv_heads x head_dim x 2 B (bfloat16 KV)


def system_prompt(agent: int, words: int) -> str:
    rng = random.Random(1000 + agent)
    body = " ".join(rng.choice(WORDS) for _ in range(words))
    return f"You are agent {agent}. Your standing instructions follow. {body}"


async def run_workload(base: str, agents: int, turns: int, concurrency: int, prefix_words: int,
                       max_tokens: int, seed: int) -> dict:
    convs = {a: [{"role": "system", "content": system_prompt(a, prefix_words)}] for a in range(agents)}
    ready: asyncio.Queue[int] = asyncio.Queue()
    order = list(range(agents))
    random.Random(seed).shuffle(order)
    for a in order:
        ready.put_nowait(a)
    done_turns = {a: 0 for a in range(agents)}
    totals = {"prompt": 0, "cached": 0, "completion": 0, "requests": 0, "failed": 0}
    by_turn = [[0, 0] for _ in range(turns)]     # [cached, prompt] tokens of each turn, over all agents
    rng = random.Random(seed + 1)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while True:
            if all(t == turns for t in done_turns.values()):
                return
            try:
                a = await asyncio.wait_for(ready.get(), timeout=0.2)
            except asyncio.TimeoutError:
                continue
            convs[a].append({"role": "user", "content": f"Turn {done_turns[a] + 1}: what is the next step for "
                                                          f"the {rng.choice(WORDS)}?"})
            resp = await client.post(f"{base}/v1/chat/completions", json={
                "model": MODEL, "messages": convs[a], "max_tokens": max_tokens, "temperature": 0})
            totals["requests"] += 1
            if resp.status_code != 200:
                totals["failed"] += 1
                convs[a].append({"role": "assistant", "content": "(error)"})
            else:
                body = resp.json()
                usage = body["usage"]
                totals["prompt"] += usage["prompt_tokens"]
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                totals["cached"] += cached
                by_turn[done_turns[a]][0] += cached
                by_turn[done_turns[a]][1] += usage["prompt_tokens"]
                totals["completion"] += usage["completion_tokens"]
                convs[a].append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
            done_turns[a] += 1
            if done_turns[a] < turns:
                ready.put_nowait(a)

    start = time.monotonic()
    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
    wall = time.monotonic() - start
    return {**totals, "wall_s": wall, "hit_rate": totals["cached"] / max(1, totals["prompt"]),
            "hit_rate_by_turn": [round(c / max(1, p), 3) for c, p in by_turn],
            "output_tok_s": totals["completion"] / wall}


def start_server(dp: int, threads: int, policy: str, replica_tokens: int, log_path: str,
                 gateway_args: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    memory_gb = replica_tokens * KV_BYTES_PER_TOKEN / 2**30
    cmd = [sys.executable, "-m", "sgrun.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--num-threads", str(threads), "--memory-gb", f"{memory_gb:.4f}", "--log-level", "warning"]
    if dp > 1:
        cmd += ["--dp", str(dp), "--gateway-policy", policy, *(f"--gateway-arg={a}" for a in gateway_args or [])]
    proc = subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited; see {log_path}")
        try:
            if dp == 1:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return proc, url
            elif httpx.get(f"{url}/readiness", timeout=1).json().get("healthy_workers") == dp:
                return proc, url
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("server did not start")


def worker_urls(url: str, dp: int) -> list[str]:
    return [w["url"] for w in httpx.get(f"{url}/workers", timeout=10).json()["workers"]] if dp > 1 else [url]


def replica_prompt_tokens(url: str, dp: int) -> list[list[int]]:
    """[cached, prompt] tokens each replica's engine counted (its /metrics): where the work landed."""
    out = []
    for u in worker_urls(url, dp):
        values = {}
        for line in httpx.get(f"{u}/metrics", timeout=10).text.splitlines():
            name, _, value = line.partition(" ")
            if name in ("sgrun_cached_prompt_tokens_total", "sgrun_engine_prompt_tokens_total"):
                values[name] = int(float(value))
        out.append([values.get("sgrun_cached_prompt_tokens_total", 0), values.get("sgrun_engine_prompt_tokens_total", 0)])
    return out


def replica_capacity(url: str, dp: int) -> list[int]:
    """KV tokens of each replica, from its /server_info (behind smg: each worker smg lists)."""
    return [httpx.get(f"{u}/server_info", timeout=10).json()["max_total_num_tokens"] for u in worker_urls(url, dp)]


def tensor_parallel_comm(batch: int, tokens: int, prefix_words: int) -> dict:
    import sgrun
    prompts = [system_prompt(a, prefix_words // 8) + f" Question {a}: what is in the manifest?" for a in range(batch)]
    params = sgrun.SamplingParams(max_new_tokens=tokens, temperature=0, ignore_eos=True)
    with sgrun.Engine(dtype="float32", quantization="none", tp=2, num_threads=1, memory_gb=0.3) as eng:
        eng.generate(prompts[:1], sgrun.SamplingParams(max_new_tokens=2, temperature=0))   # warm-up
        before = eng.stats()
        t0 = time.perf_counter()
        eng.generate(prompts, params)
        wall = time.perf_counter() - t0
        after = eng.stats()
    steps = max(1, after["tp_steps"] - before["tp_steps"])
    bcast = after["tp_broadcast_seconds"] - before["tp_broadcast_seconds"]
    reduce = after["tp_all_reduce_seconds"] - before["tp_all_reduce_seconds"]
    return {"steps": steps, "broadcast_ms_per_step": 1e3 * bcast / steps,
            "all_reduce_ms_per_step": 1e3 * reduce / steps, "comm_ms_per_step": 1e3 * (bcast + reduce) / steps,
            "output_tok_s": batch * tokens / wall, "wall_s": wall}


def _wire_rank(rank: int, port: int, batch: int, ctx: int, iters: int, out) -> None:
    import torch
    import torch.distributed as dist
    from sgrun.engine.parts.attention.backend import Segment
    from sgrun.engine.parts.step_broadcast import StepMessage, receive_step, send_step
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    cpu = torch.device("cpu")
    msg = StepMessage(torch.arange(batch), torch.full((batch,), ctx - 1), torch.arange(batch),
                      torch.zeros(batch, dtype=torch.long),
                      [Segment(i, 1, ctx, torch.arange(i * 1000, i * 1000 + -(-ctx // 16))) for i in range(batch)])
    seconds = {"pickled": 0.0, "tensors": 0.0}
    for _ in range(iters):
        for way in seconds:
            dist.barrier()
            t0 = time.perf_counter()
            if rank == 0:
                if way == "pickled":
                    dist.broadcast_object_list([msg], src=0)
                else:
                    send_step(msg, cpu)
            elif way == "pickled":
                box = [None]
                dist.broadcast_object_list(box, src=0)
            else:
                receive_step(cpu)
            dist.barrier()            # the worker holds the message
            seconds[way] += time.perf_counter() - t0
    if rank == 0:
        out.put({k: 1e3 * v / iters for k, v in seconds.items()})
    dist.destroy_process_group()


def step_wire(batch: int, ctx: int, iters: int) -> dict:
    import multiprocessing as mp
    ctx_mp = mp.get_context("spawn")
    out = ctx_mp.Queue()
    port = free_port()
    procs = [ctx_mp.Process(target=_wire_rank, args=(r, port, batch, ctx, iters, out)) for r in range(2)]
    for p in procs:
        p.start()
    ms = out.get(timeout=600)
    for p in procs:
        p.join(60)
    return {"pickled_ms": ms["pickled"], "tensors_ms": ms["tensors"], "batch": batch, "ctx": ctx, "iters": iters}


def _sgrun_smg_settings() -> str:
    """What `sgrun serve --dp` sets for smg and its replicas (sgrun/server/gateway.py)."""
    try:
        from sgrun.server.gateway import DEFAULT_SMG_ARGS, REPLICA_LOAD_KV_USAGE
        return f"{' '.join(DEFAULT_SMG_ARGS)}, replicas --load-kv-usage {REPLICA_LOAD_KV_USAGE}"
    except ImportError:  # an sgrun from before these settings
        return "none"


def _smg_version() -> str:
    try:
        from importlib.metadata import version
        return version("smg")
    except Exception:  # noqa: BLE001 - the tp configurations run without smg
        return "not installed (pip install \"sgrun[gateway]\")"


def with_load(measure, *args) -> dict:
    """Run one measurement; its result gains the load average before and after it."""
    before = os.getloadavg()[0]
    r = measure(*args)
    r["load"] = [round(before, 2), round(os.getloadavg()[0], 2)]
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--prefix-words", type=int, default=1400, help="system prompt length (~1,500 tokens)")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--replica-tokens", type=int, default=8000, help="KV pool of each DP replica, in tokens")
    add_threads(ap, help="threads in all (DP=2 gives each replica half)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--configs", default="dp1,dp2-cache_aware,dp2-round_robin")
    ap.add_argument("--tp-batch", type=int, default=8, help="tp2: requests decoding at once")
    ap.add_argument("--tp-tokens", type=int, default=48, help="tp2: tokens each request decodes")
    ap.add_argument("--wire-ctx", type=int, default=1500, help="tp2-wire: context tokens of each sequence")
    ap.add_argument("--wire-iters", type=int, default=300, help="tp2-wire: messages each way")
    ap.add_argument("--gateway-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for smg in the DP=2 configurations (repeatable), e.g. "
                         "--gateway-arg=--disable-worker-overload-protection")
    add_json_output(ap)
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    print(f"workload: {args.agents} agents x {args.turns} turns, {args.prefix_words}-word system prompts, "
          f"{args.max_tokens} output tokens, {args.concurrency} clients; {args.replica_tokens} KV tokens a replica; "
          f"gateway: smg {_smg_version()} {' '.join(args.gateway_arg)}; sgrun's settings for smg: "
          f"{_sgrun_smg_settings()}", flush=True)

    results = {}
    for name in args.configs.split(","):
        if name == "tp2-wire":
            r = results[name] = with_load(step_wire, args.tp_batch, args.wire_ctx, args.wire_iters)
            print(f"tp2-wire batch {r['batch']} x ctx {r['ctx']}: pickled {r['pickled_ms']:.3f} ms/step  tensors "
                  f"{r['tensors_ms']:.3f} ms/step  ({r['pickled_ms'] / max(r['tensors_ms'], 1e-9):.2f}x)  "
                  f"load {r['load']}", flush=True)
            continue
        if name == "tp2":
            r = results[name] = with_load(tensor_parallel_comm, args.tp_batch, args.tp_tokens, args.prefix_words)
            print(f"tp2 steps {r['steps']}  broadcast {r['broadcast_ms_per_step']:.3f} ms/step  all-reduce "
                  f"{r['all_reduce_ms_per_step']:.3f} ms/step  comm {r['comm_ms_per_step']:.3f} ms/step  "
                  f"output {r['output_tok_s']:.2f} tok/s  load {r['load']}", flush=True)
            continue
        dp = int(name[2])
        policy = name.split("-", 1)[1] if "-" in name else "cache_aware"
        tokens = args.replica_tokens * (2 if dp == 1 else 1)
        load_before = os.getloadavg()[0]
        log_path = server_log_path(f"bench_scale_out_{name}")
        proc, url = start_server(dp, args.threads, policy, tokens, log_path, args.gateway_arg)
        try:
            capacity = replica_capacity(url, dp)
            r = asyncio.run(run_workload(url, args.agents, args.turns, args.concurrency, args.prefix_words,
                                         args.max_tokens, args.seed))
            r["replica_cached_prompt_tokens"] = replica_prompt_tokens(url, dp)
        finally:
            proc.terminate()
            proc.wait(30)
        r["load"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        r["replica_kv_tokens"] = capacity
        results[name] = r
        print(f"{name:18s} hit rate {r['hit_rate']:.3f}  output {r['output_tok_s']:6.2f} tok/s  "
              f"wall {r['wall_s']:6.1f} s  requests {r['requests']} failed {r['failed']}  KV tokens/replica "
              f"{r['replica_kv_tokens']}  load {r['load']}", flush=True)
        print(f"{'':18s} hit rate by turn {r['hit_rate_by_turn']}  [cached, prompt] tokens by replica "
              f"{r['replica_cached_prompt_tokens']}", flush=True)
    ca, rr, one = (results.get(k) for k in ("dp2-cache_aware", "dp2-round_robin", "dp1"))
    if ca and one:
        print(f"cache-aware DP=2 hit rate / DP=1: {ca['hit_rate'] / max(one['hit_rate'], 1e-9):.2f}x (target >= 0.9x)")
        print(f"DP=2 x {args.threads // 2} thread vs DP=1 x {args.threads} threads, output tok/s: "
              f"{ca['output_tok_s'] / max(one['output_tok_s'], 1e-9):.2f}x")
    if ca and rr:
        print(f"cache-aware / round-robin hit rate: {ca['hit_rate'] / max(rr['hit_rate'], 1e-9):.2f}x (target >= 2x)")
    write_json(args.json_out, results)


if __name__ == "__main__":
    main()
