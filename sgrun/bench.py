"""`sgrun bench serve` (a client, not part of the server): replay a workload against any OpenAI-compatible endpoint and report
request and output-token throughput, TTFT and TPOT percentiles.

Workloads:
  chat    varied short prompts, 64-128 output tokens each
  agents  4 agents, each with its own ~1,500-token system prompt listing its tools; their
          requests are interleaved, so a server that caches prefixes across requests (radix
          cache) skips most of each prompt, one that only reuses the previous prompt does not.
Tools are written into the system prompt (not sent as `tools`) so every server sees the same
prompt text."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

_CHAT_TOPICS = ["the ocean", "a lighthouse keeper", "black holes", "sourdough bread", "chess openings",
                "the history of paper", "honeybees", "volcanoes", "jazz improvisation", "city gardens",
                "rainforests", "the moon landing", "trains in winter", "origami", "desert caravans", "glaciers"]
_CHAT_FORMS = ["Write a short story about {t}.", "Explain {t} to a ten-year-old.", "List some facts about {t}.",
               "Write a poem about {t}.", "What would you tell a friend about {t}?", "Describe {t} in detail."]
_AGENT_ROLES = [("travel", "You are a travel booking agent for Wanderly."),
                ("support", "You are a customer support agent for Voltcell batteries."),
                ("finance", "You are a personal finance assistant for Ledgerly."),
                ("devops", "You are a site reliability assistant for the Nimbus cloud platform.")]
_AGENT_QUESTIONS = ["Can you help me with my last request?", "What can you do for me today?",
                    "I need to change something urgently.", "Please check the status for me.",
                    "Summarise my options briefly.", "What should I do next?"]


@dataclass
class BenchConfig:
    base_url: str
    model: str | None = None
    api_key: str = "none"
    workload: str = "chat"
    concurrency: int = 16
    num_requests: int = 64
    request_rate: float | None = None
    seed: int = 0
    max_tokens: int | None = None
    warmup: int = 1


@dataclass
class RequestResult:
    ok: bool
    ttft: float = 0.0
    latency: float = 0.0
    output_tokens: int = 0
    error: str = ""


@dataclass
class WorkItem:
    messages: list[dict[str, str]]
    max_tokens: int
    tags: dict[str, Any] = field(default_factory=dict)


def _agent_system_prompt(name: str, role: str, rng: random.Random) -> str:
    """~1,500 tokens: a role, policies, and a JSON listing of eight tools."""
    policies = "\n".join(
        f"{i + 1}. When the user asks about {name} matters of kind {chr(65 + i)}, first confirm the account, "
        f"then check policy section {i + 1}.{rng.randint(1, 9)}, and answer in at most three sentences."
        for i in range(9))
    tools = []
    for i in range(8):
        tools.append({"type": "function", "function": {
            "name": f"{name}_action_{i}",
            "description": f"Perform {name} operation number {i}: looks up or changes records of type {i} "
                           f"for the current customer and returns a JSON summary.",
            "parameters": {"type": "object", "properties": {
                "customer_id": {"type": "string", "description": "the customer's id"},
                "reference": {"type": "string", "description": f"a {name} reference number"},
                "amount": {"type": "number", "description": "an amount, if relevant"},
                "confirm": {"type": "boolean"}}, "required": ["customer_id"]}}})
    listing = "\n".join(json.dumps(t) for t in tools)
    return (f"{role}\n\n# Policies\n{policies}\n\n# Tools\nYou may call these functions:\n<tools>\n{listing}\n"
            f"</tools>\nTo call one, answer with <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>.")


def build_workload(cfg: BenchConfig) -> list[WorkItem]:
    rng = random.Random(cfg.seed)
    items: list[WorkItem] = []
    if cfg.workload == "chat":
        for i in range(cfg.num_requests):
            prompt = rng.choice(_CHAT_FORMS).format(t=rng.choice(_CHAT_TOPICS))
            items.append(WorkItem([{"role": "user", "content": prompt}],
                                  cfg.max_tokens or rng.randint(64, 128)))
    elif cfg.workload == "agents":
        systems = [_agent_system_prompt(name, role, rng) for name, role in _AGENT_ROLES]
        for i in range(cfg.num_requests):
            agent = i % len(systems)  # interleaved: consecutive requests come from different agents
            items.append(WorkItem([{"role": "system", "content": systems[agent]},
                                   {"role": "user", "content": f"{rng.choice(_AGENT_QUESTIONS)} (ticket {i})"}],
                                  cfg.max_tokens or 32, {"agent": agent}))
    else:
        raise ValueError(f"unknown workload {cfg.workload!r}; use chat or agents")
    return items


async def _discover_model(client: httpx.AsyncClient, cfg: BenchConfig) -> str:
    if cfg.model:
        return cfg.model
    r = await client.get("/models")
    r.raise_for_status()
    return r.json()["data"][0]["id"]


async def _one_request(client: httpx.AsyncClient, model: str, item: WorkItem) -> RequestResult:
    body = {"model": model, "messages": item.messages, "max_tokens": item.max_tokens, "temperature": 0.0,
            "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first: float | None = None
    chunks_with_text = 0
    usage_tokens: int | None = None
    try:
        async with client.stream("POST", "/chat/completions", json=body) as r:
            if r.status_code != 200:
                return RequestResult(False, error=f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    usage_tokens = chunk["usage"].get("completion_tokens")
                for choice in chunk.get("choices") or []:
                    if (choice.get("delta") or {}).get("content"):
                        chunks_with_text += 1
                        if first is None:
                            first = time.perf_counter()
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        return RequestResult(False, error=f"{type(exc).__name__}: {exc}")
    end = time.perf_counter()
    tokens = usage_tokens if usage_tokens is not None else chunks_with_text
    return RequestResult(True, ttft=(first or end) - start, latency=end - start, output_tokens=tokens)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


async def run_benchmark(cfg: BenchConfig) -> dict[str, Any]:
    items = build_workload(cfg)
    limits = httpx.Limits(max_connections=cfg.concurrency + 4, max_keepalive_connections=cfg.concurrency + 4)
    headers = {"Authorization": f"Bearer {cfg.api_key}"}
    async with httpx.AsyncClient(base_url=cfg.base_url.rstrip("/"), headers=headers, limits=limits,
                                 timeout=httpx.Timeout(600.0)) as client:
        model = await _discover_model(client, cfg)
        for w in range(cfg.warmup):
            await _one_request(client, model, WorkItem([{"role": "user", "content": f"Warm-up {w}: say hi."}], 4))
        sem = asyncio.Semaphore(cfg.concurrency)
        rng = random.Random(cfg.seed + 1)

        async def run_item(item: WorkItem) -> RequestResult:
            async with sem:
                return await _one_request(client, model, item)

        start = time.perf_counter()
        tasks = []
        for item in items:
            tasks.append(asyncio.create_task(run_item(item)))
            if cfg.request_rate:
                await asyncio.sleep(rng.expovariate(cfg.request_rate))
            else:
                await asyncio.sleep(0)  # keep submission order = arrival order
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft for r in ok]
    tpots = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    out_tokens = sum(r.output_tokens for r in ok)
    return {
        "base_url": cfg.base_url, "model": model, "workload": cfg.workload, "concurrency": cfg.concurrency,
        "num_requests": cfg.num_requests, "request_rate": cfg.request_rate,
        "completed": len(ok), "failed": len(results) - len(ok),
        "errors": sorted({r.error for r in results if not r.ok})[:5],
        "duration_s": duration,
        "request_throughput": len(ok) / duration,
        "output_tokens": out_tokens,
        "output_token_throughput": out_tokens / duration,
        "ttft_p50_ms": 1000 * _percentile(ttfts, 0.5), "ttft_p90_ms": 1000 * _percentile(ttfts, 0.9),
        "ttft_p99_ms": 1000 * _percentile(ttfts, 0.99),
        "tpot_p50_ms": 1000 * _percentile(tpots, 0.5), "tpot_p90_ms": 1000 * _percentile(tpots, 0.9),
        "tpot_p99_ms": 1000 * _percentile(tpots, 0.99),
        "e2e_p50_s": _percentile([r.latency for r in ok], 0.5),
        "mean_output_tokens": statistics.mean([r.output_tokens for r in ok]) if ok else 0.0,
    }


def print_report(report: dict[str, Any]) -> None:
    print(f"workload={report['workload']} concurrency={report['concurrency']} requests={report['num_requests']} "
          f"model={report['model']} url={report['base_url']}")
    print(f"  completed {report['completed']}  failed {report['failed']}  duration {report['duration_s']:.1f} s")
    for e in report["errors"]:
        print(f"  error: {e}")
    print(f"  request throughput      {report['request_throughput']:.3f} req/s")
    print(f"  output token throughput {report['output_token_throughput']:.1f} tok/s "
          f"({report['output_tokens']} tokens, mean {report['mean_output_tokens']:.1f}/request)")
    print(f"  TTFT p50 {report['ttft_p50_ms']:.0f} ms   p99 {report['ttft_p99_ms']:.0f} ms")
    print(f"  TPOT p50 {report['tpot_p50_ms']:.1f} ms   p99 {report['tpot_p99_ms']:.1f} ms")
    print(f"  E2E  p50 {report['e2e_p50_s']:.2f} s")


# --------------------------------------------------------------------------- `sgrun bench serve`


def add_bench_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("bench", help="benchmarks")
    sub = p.add_subparsers(dest="bench_command", required=True)
    s = sub.add_parser("serve", help="replay a workload against an OpenAI-compatible endpoint",
                       description="Replay a chat or agents workload against any OpenAI-compatible server and "
                                   "report request and output-token throughput, TTFT and TPOT p50/p99.")
    s.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:30000/v1")
    s.add_argument("--model", default=None, help="model name to send (default: the first of /v1/models)")
    s.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    s.add_argument("--workload", choices=["chat", "agents"], default="chat")
    s.add_argument("--concurrency", type=_concurrency_levels, default=[16],
                   help="requests in flight; a comma list (1,4,16) runs one level after another")
    s.add_argument("--num-requests", type=int, default=64)
    s.add_argument("--request-rate", type=float, default=None,
                   help="Poisson arrivals per second (default: send as fast as concurrency allows)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--max-tokens", type=int, default=None,
                   help="override the workload's output length (chat: 64-128, agents: 32)")
    s.add_argument("--warmup", type=int, default=1, help="requests sent (and not measured) before the run")
    s.add_argument("--json", dest="json_out", default=None,
                   help="also write the results to this JSON file (a list when several concurrency levels)")
    s.add_argument("--plot", default=None, metavar="OUT.png",
                   help="draw throughput vs concurrency and TTFT/TPOT percentiles (needs the 'plot' extra)")
    s.set_defaults(func=run_bench_serve)
    return p


def _concurrency_levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"give integers, e.g. 16 or 1,4,16; got {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"concurrency levels must be >= 1; got {text!r}")
    return levels


def run_bench_serve(args: argparse.Namespace) -> int:
    if args.plot:
        from sgrun.bench_plot import pyplot_or_error
        pyplot_or_error()  # no matplotlib: say so before the run, not after it
    reports = []
    for level in args.concurrency:
        cfg = BenchConfig(base_url=args.base_url, model=args.model, api_key=args.api_key, workload=args.workload,
                          concurrency=level, num_requests=args.num_requests, request_rate=args.request_rate,
                          seed=args.seed, max_tokens=args.max_tokens, warmup=args.warmup)
        reports.append(asyncio.run(run_benchmark(cfg)))
        print_report(reports[-1])
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(reports[0] if len(reports) == 1 else reports, f, indent=2)
    if args.plot:
        from sgrun.bench_plot import plot_serve
        plot_serve(reports, args.plot)
        print(f"plot written to {args.plot}")
    return 0 if all(r["failed"] == 0 for r in reports) else 1
