"""`sgrun router --worker URL ...` and `sgrun serve --dp N`: the cache-aware router in front of
remote `sgrun serve` workers, or in front of N local replicas it starts itself."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from sgrun.server.routing_policy import POLICIES


def add_router_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--router-policy", default="cache_aware", choices=POLICIES,
                   help="how the router picks a replica (default: cache_aware)")


def add_router_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("router", help="a cache-aware router in front of sgrun serve workers",
                              description="Serve one OpenAI-compatible endpoint that forwards each request to the "
                                          "worker most likely to hold its prompt prefix in cache.")
    p.add_argument("--worker", action="append", required=True, metavar="URL",
                   help="a worker's base URL, e.g. http://10.0.0.2:30000 (repeat for each worker)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--max-body-bytes", type=int, default=8 << 20, help="larger request bodies get 413")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    add_router_options(p)
    p.set_defaults(func=run_router)
    return p


def _serve_router(worker_urls: list[str], args: argparse.Namespace) -> None:
    import uvicorn

    from sgrun.server.router import build_router_app

    app = build_router_app(worker_urls, policy=args.router_policy, max_body_bytes=args.max_body_bytes)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5)


def run_router(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    print(f"sgrun router: {len(args.worker)} workers ({args.router_policy}) on http://{args.host}:{args.port}",
          file=sys.stderr, flush=True)
    _serve_router(args.worker, args)
    return 0


def run_data_parallel(args: argparse.Namespace, serve_parser: argparse.ArgumentParser) -> int:
    """`sgrun serve --dp N`: start N replicas with this command's other options, then the router."""
    from sgrun.server.replicas import argv_from_namespace, spawn_replicas

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    shared = argv_from_namespace(serve_parser, args, skip={"dp", "host", "port", "num_threads", "router_policy"})
    started = time.monotonic()
    print(f"sgrun serve: starting {args.dp} replicas ...", file=sys.stderr, flush=True)
    replicas = spawn_replicas(args.dp, shared, num_threads=args.num_threads)
    try:
        print(f"sgrun serve: {args.dp} replicas ready in {time.monotonic() - started:.1f} s "
              f"({', '.join(replicas.urls)}); router ({args.router_policy}) on http://{args.host}:{args.port}",
              file=sys.stderr, flush=True)
        _serve_router(replicas.urls, args)
    finally:
        replicas.stop()
    return 0
