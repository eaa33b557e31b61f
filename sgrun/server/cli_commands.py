"""`sgrun serve`: the argument parser sgrun/cli.py attaches to its subcommands, and the function
it runs."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from sgrun.cli_flags import add_device_arguments, add_speculative_arguments, device_kwargs, speculative_kwargs
from sgrun.errors import SgrunError
from sgrun.server.gateway import add_gateway_options, run_data_parallel


def add_serve_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                              description="Serve a model over the OpenAI-compatible API (/v1/...) and sgrun's "
                                          "native protocol (/generate, /score, /model_info).")
    p.add_argument("--model", default=None,
                   help="GGUF file, model folder or a name the fetcher knows (default: SmolLM2-135M-Instruct)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--api-key", default=os.environ.get("SGRUN_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on every endpoint but /health, /metrics and the web page's "
                        "files (the page asks for the key) "
                        "(default: $SGRUN_API_KEY, else no key)")
    p.add_argument("--served-model-name", action="append", default=None,
                   help="name clients use in 'model' (repeatable; the first is listed by /v1/models)")
    p.add_argument("--max-body-bytes", type=int, default=8 << 20, help="larger request bodies get 413")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    add_device_arguments(p)
    add_speculative_arguments(p)
    p.add_argument("--num-threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--quantization", default="auto", choices=["auto", "none", "int8", "int4"],
                   help="weights in memory: auto follows the file (Q4 GGUF -> int4, Q8 -> int8, f16/f32 -> none)")
    p.add_argument("--max-running", type=int, default=64, help="most requests decoding at once")
    p.add_argument("--max-batch-tokens", type=int, default=2048, help="token budget of one forward pass")
    p.add_argument("--memory-gb", type=float, default=None, help="KV cache size")
    p.add_argument("--max-context", type=int, default=None, help="cap on prompt + output tokens")
    p.add_argument("--disable-prefix-cache", action="store_true", help="turn the radix cache off")
    p.add_argument("--tool-call-parser", default=None,
                   help="tool-call format: hermes, llama3_json, mistral, pythonic, qwen3_coder, phi4_mini or gemma "
                        "(default: detected from the model's chat template, else hermes)")
    p.add_argument("--constraint-budget", type=float, default=5.0, metavar="SECONDS",
                   help="compile time allowed per constraint (schema, regex, grammar, tools); past it the request "
                        "gets a 400 saying the constraint is too complex (default: 5)")
    p.add_argument("--strict-budget", action="store_true",
                   help="refuse (400) a constrained request whose shortest valid output needs more than its "
                        "max_tokens; by default it runs and ends with finish_reason 'length', as OpenAI's API "
                        "(strict_budget in the request decides per request)")
    p.add_argument("--reasoning-parser", default=None,
                   help="split <think>...</think> into reasoning_content (qwen3, deepseek_r1); constraints and tool "
                        "grammars start after the reasoning")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--tp", type=int, default=1,
                   help="tensor parallelism: shard the model over N processes (gloo on CPU, NCCL on CUDA); "
                        "under torchrun, the ranks torchrun started")
    p.add_argument("--load-kv-usage", default=None, choices=["held", "cache"],
                   help="KV usage in the load report SGLang's gateway smg polls (/v1/loads): held (by requests, "
                        "SGLang's meaning; the default) or cache (held or kept by the prefix cache, which --dp "
                        "replicas report; docs/scale-out.md)")
    p.add_argument("--dp", type=int, default=1,
                   help="data parallelism: run N engine replicas (each its own KV pool and radix cache, an equal "
                        "share of the threads) behind SGLang's gateway smg with its cache-aware policy on --port "
                        "(needs: pip install \"sgrun[gateway]\")")
    add_gateway_options(p)
    p.set_defaults(func=run_serve, serve_parser=p)
    return p


def run_serve(args: argparse.Namespace) -> int:
    if args.dp > 1:
        return run_data_parallel(args, args.serve_parser)
    if args.dp < 1:
        raise SgrunError(f"--dp must be at least 1, got {args.dp}")
    if args.tp > 1:
        from sgrun.engine.stages.tp_worker import torchrun_spec, worker_main
        spec = torchrun_spec(args.model, args.dtype, args.quantization, args.tp, args.num_threads)
        if spec is not None:        # a torchrun rank other than 0: run forwards for rank 0, serve nothing
            worker_main(spec)
            return 0
    started = time.perf_counter()
    import uvicorn

    from sgrun.engine.engine import Engine
    from sgrun.server.app import build_app

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    print(f"sgrun serve: loading {args.model or 'the default model'} ...", file=sys.stderr, flush=True)
    engine = Engine(args.model, dtype=args.dtype, num_threads=args.num_threads, max_running=args.max_running,
                    quantization=args.quantization, **device_kwargs(args), **speculative_kwargs(args),
                    max_batch_tokens=args.max_batch_tokens, memory_gb=args.memory_gb,
                    enable_prefix_cache=not args.disable_prefix_cache, max_context=args.max_context, tp=args.tp)
    app = build_app(engine, served_model_names=args.served_model_name, api_key=args.api_key,
                    max_body_bytes=args.max_body_bytes, close_engine_on_shutdown=True,
                    tool_call_parser=args.tool_call_parser, reasoning_parser=args.reasoning_parser,
                    constraint_budget_s=args.constraint_budget, strict_budget=args.strict_budget,
                    load_kv_usage=args.load_kv_usage or "held")
    # The details (backend, pool sizing, CUDA graphs) go to the log; a person reads the one line.
    report = engine.startup_report()
    logging.getLogger("sgrun.server").info("start-up: " + ", ".join(
        f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in report.items()))
    print(serve_banner(engine, report, args.host, args.port, time.perf_counter() - started), file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5)
    return 0


def serve_banner(engine, report: dict, host: str, port: int, seconds: float) -> str:
    """What a person reads when the server is up: where, what, how big, how long it took, and
    the engine's start-up line (what runs, from `report`: engine.startup_report())."""
    kv_tokens = engine.pool.num_pages * engine.pool.page_size
    dtype = str(engine.dtype).replace("torch.", "")
    device = str(getattr(engine, "device", "cpu"))
    from sgrun.engine.startup_report import startup_line
    return (f"sgrun serve: http://{host}:{port}/  model {engine.model_name}  dtype {dtype}  device {device}  "
            f"KV capacity {kv_tokens} tokens  started in {seconds:.1f} s\nsgrun serve: {startup_line(report)}")
