"""Serve benchmark: sgrun serve vs llama-cpp-python's OpenAI server on the same GGUF.

Starts each server as a subprocess on a free loopback port, replays the `chat` workload at
concurrency 16 and the `agents` workload at concurrency 1 with `sgrun bench serve`'s client,
and prints both results and the ratios the targets are stated in:

  chat, concurrency 16:  sgrun output tok/s  >= 2.0 x llama-cpp-python's
  agents, concurrency 1: sgrun TTFT p50      <= 0.3 x llama-cpp-python's

    python benchmarks/bench_serve.py [--llama-python /path/to/venv/bin/python] [--model GGUF]
                                     [--chat-requests 48] [--agents-requests 16] [--threads 2]

llama-cpp-python is looked for in --llama-python (default: this interpreter). When it is not
installed, only sgrun is measured and the comparison is reported as skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

import httpx

from sgrun.models.fetch import resolve_model_path
from sgrun.child_process import free_port
from sgrun.bench import BenchConfig, print_report, run_benchmark
from bench_options import add_dtype, add_json_output, add_threads, load_avg, server_log_path, write_json, machine_line


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(f"{url} did not come up")


def run_workloads(url: str, chat_requests: int, agents_requests: int, workloads: list[str]) -> dict[str, dict]:
    out = {}
    for workload, concurrency, n in (("chat", 16, chat_requests), ("agents", 1, agents_requests)):
        if workload not in workloads:
            continue
        cfg = BenchConfig(base_url=url + "/v1", workload=workload, concurrency=concurrency, num_requests=n,
                          warmup=2)
        report = asyncio.run(run_benchmark(cfg))
        print_report(report)
        out[workload] = report
    return out


def serve(cmd: list[str], url: str, log_path: str, env: dict[str, str] | None = None):
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    wait_ready(url, proc)
    return proc, log


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def has_llama_cpp(python: str) -> bool:
    return subprocess.run([python, "-c", "import llama_cpp.server"], capture_output=True).returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF path (default: the default SmolLM2 GGUF)")
    ap.add_argument("--llama-python", default=sys.executable, help="python that has llama-cpp-python[server]")
    add_threads(ap)
    ap.add_argument("--chat-requests", type=int, default=48)
    ap.add_argument("--agents-requests", type=int, default=16)
    add_dtype(ap, "float32")
    ap.add_argument("--only", choices=["sgrun", "llama"], default=None)
    ap.add_argument("--workloads", default="chat,agents", help="comma-separated subset of chat,agents")
    add_json_output(ap)
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    gguf = str(resolve_model_path(args.model))
    print(f"model {gguf}; load: {load_avg()}")
    results: dict[str, dict] = {}

    if args.only in (None, "sgrun"):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc, log = serve([sys.executable, "-m", "sgrun.cli", "serve", "--model", gguf, "--port", str(port),
                           "--dtype", args.dtype, "--num-threads", str(args.threads), "--log-level", "warning"],
                          url, server_log_path("bench_sgrun_serve"))
        try:
            print("== sgrun serve")
            results["sgrun"] = run_workloads(url, args.chat_requests, args.agents_requests, args.workloads.split(","))
        finally:
            stop(proc)
            log.close()

    if args.only in (None, "llama"):
        if not has_llama_cpp(args.llama_python):
            print(f"llama-cpp-python is not installed for {args.llama_python}: comparison skipped")
        else:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            proc, log = serve([args.llama_python, "-m", "llama_cpp.server", "--model", gguf, "--port", str(port),
                               "--host", "127.0.0.1", "--n_threads", str(args.threads), "--n_ctx", "8192",
                               # by default a new request cuts off the running stream; queue instead
                               "--interrupt_requests", "False"],
                              url, server_log_path("bench_llama_cpp_server"),
                              # OpenMP's default busy-waiting makes llama.cpp 10x slower on a shared
                              # box; passive waiting is its best setting here.
                              env={"OMP_WAIT_POLICY": "passive"})
            try:
                print("== llama-cpp-python server")
                results["llama"] = run_workloads(url, args.chat_requests, args.agents_requests, args.workloads.split(","))
            finally:
                stop(proc)
                log.close()

    if "sgrun" in results and "llama" in results and len(results["sgrun"]) == len(results["llama"]) == 2:
        s, l = results["sgrun"], results["llama"]
        tok_ratio = s["chat"]["output_token_throughput"] / l["chat"]["output_token_throughput"]
        ttft_ratio = s["agents"]["ttft_p50_ms"] / l["agents"]["ttft_p50_ms"]
        print(f"chat c16 output tok/s: sgrun {s['chat']['output_token_throughput']:.1f} vs llama-cpp-python "
              f"{l['chat']['output_token_throughput']:.1f} -> {tok_ratio:.2f}x (target >= 2.0x)")
        print(f"agents c1 TTFT p50: sgrun {s['agents']['ttft_p50_ms']:.0f} ms vs llama-cpp-python "
              f"{l['agents']['ttft_p50_ms']:.0f} ms -> {ttft_ratio:.2f}x (target <= 0.3x)")
    write_json(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
