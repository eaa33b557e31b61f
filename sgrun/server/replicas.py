"""Data-parallel replicas on one machine: N `sgrun serve` processes, each with its own engine,
KV pool and radix cache, on loopback ports, with an equal share of the CPU threads (or one GPU
each, through CUDA_VISIBLE_DEVICES, when the machine has that many). `sgrun serve --dp N`
(gateway.py) puts smg in front of them."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx

from sgrun.child_process import die_with_parent, free_port

from sgrun.errors import SgrunError


class ReplicaStartError(SgrunError):
    pass


@dataclass
class LocalReplicas:
    processes: list[subprocess.Popen] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    def stop(self, timeout: float = 10.0) -> None:
        for p in self.processes:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + timeout
        for p in self.processes:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def argv_from_namespace(parser: argparse.ArgumentParser, args: argparse.Namespace, skip: set[str]) -> list[str]:
    """The command line that reproduces `args` for `parser`, less the options in `skip` (every
    option a replica shares with its siblings, whichever options the serve parser grows)."""
    argv: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest in skip or action.dest == "help":
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        opt = action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            argv.append(opt if value else "--no-" + opt.removeprefix("--"))
        elif isinstance(action, argparse._StoreTrueAction):
            argv += [opt] if value else []
        elif isinstance(action, argparse._StoreFalseAction):
            argv += [] if value else [opt]
        elif isinstance(action, argparse._AppendAction):
            for v in value or []:
                argv += [opt, str(v)]
        elif isinstance(action, argparse._StoreAction) and value is not None:
            argv += [opt, str(value)]
    return argv


def _cuda_count() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no torch CUDA: CPU replicas
        return 0


def spawn_replicas(n: int, serve_argv: list[str], num_threads: int | None = None,
                   startup_timeout: float = 600.0, log_dir: str | None = None) -> LocalReplicas:
    """Start `n` replicas of `sgrun serve <serve_argv>` and wait until each answers /health."""
    total = num_threads or os.cpu_count() or 1
    per_replica = max(1, total // n)
    gpus = _cuda_count()
    replicas = LocalReplicas()
    try:
        for i in range(n):
            port = free_port()
            env = dict(os.environ)
            if gpus >= n:
                env["CUDA_VISIBLE_DEVICES"] = str(i)
            cmd = [sys.executable, "-m", "sgrun.cli", "serve", *serve_argv, "--host", "127.0.0.1",
                   "--port", str(port), "--num-threads", str(per_replica)]
            out = open(os.path.join(log_dir, f"replica-{i}.log"), "w") if log_dir else None   # None: the replica logs to our terminal
            replicas.processes.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                     preexec_fn=die_with_parent))
            replicas.urls.append(f"http://127.0.0.1:{port}")
        _wait_ready(replicas, startup_timeout)
    except BaseException:
        replicas.stop()
        raise
    return replicas


def _wait_ready(replicas: LocalReplicas, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = set(range(len(replicas.urls)))
    while pending:
        for i in sorted(pending):
            code = replicas.processes[i].poll()
            if code is not None:
                raise ReplicaStartError(f"replica {i} exited with code {code} while starting; run the same "
                                        "`sgrun serve` command without --dp to see its error")
            try:
                if httpx.get(f"{replicas.urls[i]}/health", timeout=1.0).status_code == 200:
                    pending.discard(i)
            except httpx.HTTPError:
                pass
        if pending and time.monotonic() > deadline:
            raise ReplicaStartError(f"replicas {sorted(pending)} did not answer /health within {timeout:.0f} s")
        if pending:
            time.sleep(0.5)
