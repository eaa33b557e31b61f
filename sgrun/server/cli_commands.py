"""`sgrun serve` and `sgrun bench serve`: argument parsers that sgrun/cli.py attaches to its
subcommands, and the functions they run."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from sgrun.errors import SgrunError
from sgrun.server.router_cli import add_router_options, run_data_parallel


def add_serve_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                              description="Serve a model over the OpenAI-compatible API (/v1/...) and sgrun's "
                                          "native protocol (/generate, /score, /model_info).")
    p.add_argument("--model", default=None,
                   help="GGUF file, model folder or a name the fetcher knows (default: SmolLM2-135M-Instruct)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--api-key", default=os.environ.get("SGRUN_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on every endpoint but /health and /metrics "
                        "(default: $SGRUN_API_KEY, else no key)")
    p.add_argument("--served-model-name", action="append", default=None,
                   help="name clients use in 'model' (repeatable; the first is listed by /v1/models)")
    p.add_argument("--max-body-bytes", type=int, default=8 << 20, help="larger request bodies get 413")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    p.add_argument("--num-threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--max-running", type=int, default=64, help="most requests decoding at once")
    p.add_argument("--max-batch-tokens", type=int, default=2048, help="token budget of one forward pass")
    p.add_argument("--memory-gb", type=float, default=None, help="KV cache size")
    p.add_argument("--max-context", type=int, default=None, help="cap on prompt + output tokens")
    p.add_argument("--disable-prefix-cache", action="store_true", help="turn the radix cache off")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--dp", type=int, default=1,
                   help="data parallelism: run N engine replicas (each its own KV pool and radix cache, an equal "
                        "share of the threads) behind a cache-aware router on --port")
    add_router_options(p)
    p.set_defaults(func=run_serve, serve_parser=p)
    return p


def run_serve(args: argparse.Namespace) -> int:
    if args.dp > 1:
        return run_data_parallel(args, args.serve_parser)
    if args.dp < 1:
        raise SgrunError(f"--dp must be at least 1, got {args.dp}")
    import uvicorn

    from sgrun.engine.engine import Engine
    from sgrun.server.app import build_app

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    print(f"sgrun serve: loading {args.model or 'the default model'} ...", file=sys.stderr, flush=True)
    engine = Engine(args.model, dtype=args.dtype, num_threads=args.num_threads, max_running=args.max_running,
                    max_batch_tokens=args.max_batch_tokens, memory_gb=args.memory_gb,
                    enable_prefix_cache=not args.disable_prefix_cache, max_context=args.max_context)
    app = build_app(engine, served_model_names=args.served_model_name, api_key=args.api_key,
                    max_body_bytes=args.max_body_bytes, close_engine_on_shutdown=True)
    print(f"sgrun serve: {engine.model_name} on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5)
    return 0


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
    s.add_argument("--concurrency", type=int, default=16)
    s.add_argument("--num-requests", type=int, default=64)
    s.add_argument("--request-rate", type=float, default=None,
                   help="Poisson arrivals per second (default: send as fast as concurrency allows)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--max-tokens", type=int, default=None,
                   help="override the workload's output length (chat: 64-128, agents: 32)")
    s.add_argument("--warmup", type=int, default=1, help="requests sent (and not measured) before the run")
    s.add_argument("--json", dest="json_out", default=None, help="also write the results to this JSON file")
    s.set_defaults(func=run_bench_serve)
    return p


def run_bench_serve(args: argparse.Namespace) -> int:
    import asyncio

    from sgrun.server.bench import BenchConfig, print_report, run_benchmark

    cfg = BenchConfig(base_url=args.base_url, model=args.model, api_key=args.api_key, workload=args.workload,
                      concurrency=args.concurrency, num_requests=args.num_requests, request_rate=args.request_rate,
                      seed=args.seed, max_tokens=args.max_tokens, warmup=args.warmup)
    report = asyncio.run(run_benchmark(cfg))
    print_report(report)
    if args.json_out:
        import json
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if report["failed"] == 0 else 1
