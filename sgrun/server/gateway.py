"""`sgrun serve --dp N`: N engine replicas on this machine behind SGLang's gateway, smg (the
Shepherd Model Gateway, `pip install "sgrun[gateway]"`), with its cache-aware policy.

sgrun keeps no router of its own: smg brings the routing policies, retries, circuit breakers,
health checks and metrics. This module only starts the replicas (replicas.py), starts `smg
launch` in front of them, waits until smg has registered every replica, and stops all of them
together. docs/scale-out.md says how to run the same thing across machines.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import signal
import subprocess
import sys
import time

import httpx

from sgrun.child_process import die_with_parent, free_port
from sgrun.errors import SgrunError

INSTALL_HINT = 'pip install "sgrun[gateway]"   (or: pip install smg)'
# smg's policies that suit sgrun workers over HTTP (the others need gRPC workers, PD or a manual key).
GATEWAY_POLICIES = ("cache_aware", "round_robin", "least_load", "power_of_two", "prefix_hash", "random")
# The smg settings `sgrun serve --dp N` passes ahead of --gateway-arg (smg takes the last value of an
# option, so a user's --gateway-arg overrides each). Why each is what it is: docs/scale-out.md,
# "The smg settings sgrun passes".
#   --worker-overload-token-usage 1.0: smg's overload protection (on by default at 0.8) leaves a
#     worker out of routing while its KV usage is at or over the mark. That moves a conversation's
#     next turn off the replica that holds its prefix, to recompute it all on another and double
#     its cache footprint, where on sgrun the turn would wait in the queue briefly and then reuse
#     its prefix. At 1.0 only a pool wholly held by requests counts (with the replicas' "cache"
#     reading, which stays under 1.0, never); the waiting-queue gate (8 requests) still moves
#     work off a replica that falls behind.
#   --load-monitor-interval 1: smg reads each replica's /v1/loads every second instead of every
#     10. A prompt no replica holds goes to the lowest expected wait: the queued work a replica
#     reports (with the "cache" reading, its cache footprint too), the work smg sent it since its
#     last poll, and a barrier on its KV usage. With a 10 s poll the since-poll work decides (a
#     turn that reuses its own prefix counts as much as a new prompt), and new conversations pile
#     onto one replica by chance; polled every second, the footprint (cache room) decides. The
#     poll is one engine.stats() call on loopback.
DEFAULT_SMG_ARGS = ("--worker-overload-token-usage", "1.0", "--load-monitor-interval", "1")
# How the replicas behind smg report KV usage unless --load-kv-usage says otherwise (loads.py).
REPLICA_LOAD_KV_USAGE = "cache"
_SMG_LOG_LEVELS = {"critical": "error", "error": "error", "warning": "warn", "info": "info", "debug": "debug"}


class GatewayError(SgrunError):
    pass


def add_gateway_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gateway-policy", default="cache_aware", choices=GATEWAY_POLICIES,
                   help="with --dp: how smg picks a replica (default: cache_aware)")
    p.add_argument("--gateway-metrics-port", type=int, default=None,
                   help="with --dp: the port of smg's Prometheus /metrics, on --host (default: a free port, printed)")
    p.add_argument("--gateway-arg", action="append", default=[], metavar="ARG",
                   help="with --dp: one more argument for `smg launch` (repeatable; write options as "
                        "--gateway-arg=--name and their values as a second --gateway-arg, see `smg launch --help`)")


def require_smg() -> None:
    """Fail with the install line when smg, an optional dependency, is missing."""
    if importlib.util.find_spec("smg") is None:
        raise GatewayError(f"--dp N runs the replicas behind SGLang's gateway smg, which is not installed: "
                           f"{INSTALL_HINT}")


def model_aliases(model_id: str) -> list[str]:
    """The names a single `sgrun serve` also accepts for its model (the name without its
    quantisation suffix, state.py), so that clients keep working when --dp is added."""
    short = model_id.split(".")[0]
    return [short] if short and short != model_id else []


def smg_command(worker_urls: list[str], *, host: str, port: int, policy: str, metrics_port: int,
                log_level: str = "info", aliases: dict[str, str] | None = None,
                max_payload_bytes: int | None = None, extra: list[str] | None = None) -> list[str]:
    """`smg launch` in front of `worker_urls` (python -m smg: the interpreter that runs sgrun)."""
    cmd = [sys.executable, "-m", "smg", "launch", "--host", host, "--port", str(port),
           "--worker-urls", *worker_urls, "--policy", policy,
           "--prometheus-host", host, "--prometheus-port", str(metrics_port),
           "--log-level", _SMG_LOG_LEVELS.get(log_level, "info")]
    if max_payload_bytes is not None:
        cmd += ["--max-payload-size", str(max_payload_bytes)]
    for alias, canonical in (aliases or {}).items():
        cmd += ["--model-alias", f"{alias}={canonical}"]
    return cmd + list(DEFAULT_SMG_ARGS) + list(extra or [])


def wait_for_gateway(proc: subprocess.Popen, url: str, workers: int, timeout: float = 120.0) -> None:
    """Until smg's /readiness counts every worker healthy (it has probed and registered them)."""
    deadline = time.monotonic() + timeout
    while True:
        code = proc.poll()
        if code is not None:
            raise GatewayError(f"smg exited with code {code} while starting; its log above says why")
        try:
            resp = httpx.get(f"{url}/readiness", timeout=2.0)
            if resp.status_code == 200 and resp.json().get("healthy_workers", 0) >= workers:
                return
        except (httpx.HTTPError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise GatewayError(f"smg did not report {workers} healthy workers at {url}/readiness "
                               f"within {timeout:.0f} s")
        time.sleep(0.5)


def _served_model_id(worker_url: str, api_key: str | None) -> str | None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        data = httpx.get(f"{worker_url}/v1/models", headers=headers, timeout=5.0).json()["data"]
        return data[0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError):
        return None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_data_parallel(args: argparse.Namespace, serve_parser: argparse.ArgumentParser) -> int:
    """Start `args.dp` replicas with this command's other options, then smg on --host/--port."""
    from sgrun.server.replicas import argv_from_namespace, spawn_replicas

    require_smg()
    if args.load_kv_usage is None:
        args.load_kv_usage = REPLICA_LOAD_KV_USAGE
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    shared = argv_from_namespace(serve_parser, args, skip={"dp", "host", "port", "num_threads", "gateway_policy",
                                                         "gateway_metrics_port", "gateway_arg"})
    # SIGTERM (a service manager's stop) ends the replicas and smg too, like Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    print(f"sgrun serve: starting {args.dp} replicas ...", file=sys.stderr, flush=True)
    replicas = spawn_replicas(args.dp, shared, num_threads=args.num_threads)
    gateway: subprocess.Popen | None = None
    try:
        model_id = _served_model_id(replicas.urls[0], args.api_key)
        aliases = {a: model_id for a in model_aliases(model_id)} if model_id and not args.served_model_name else {}
        metrics_port = args.gateway_metrics_port or free_port(args.host)
        cmd = smg_command(replicas.urls, host=args.host, port=args.port, policy=args.gateway_policy,
                          metrics_port=metrics_port, log_level=args.log_level, aliases=aliases,
                          max_payload_bytes=args.max_body_bytes, extra=args.gateway_arg)
        if args.api_key:       # smg authenticates to the replicas with the same key the clients use
            cmd += ["--api-key", args.api_key]
        gateway = subprocess.Popen(cmd, preexec_fn=die_with_parent)
        url = f"http://{args.host}:{args.port}"
        wait_for_gateway(gateway, url, args.dp)
        print(f"sgrun serve: {args.dp} replicas ({', '.join(replicas.urls)}) behind smg ({args.gateway_policy}) "
              f"on {url}, ready in {time.monotonic() - started:.1f} s; smg metrics on "
              f"http://{args.host}:{metrics_port}/metrics", file=sys.stderr, flush=True)
        return gateway.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if gateway is not None and gateway.poll() is None:
            gateway.terminate()
            try:
                gateway.wait(15)
            except subprocess.TimeoutExpired:
                gateway.kill()
        replicas.stop()
