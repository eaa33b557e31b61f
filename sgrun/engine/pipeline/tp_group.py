"""Tensor parallelism on torch.distributed: rank 0 is the engine, ranks 1..N-1 are worker
processes that only run the forward pass over their shard of the model and of the paged pool.

Rank 0 owns everything stateful (scheduler, radix cache, constraints, sampling). Each step it
broadcasts the batch (token ids, positions, where the new K/V go, each request's page table) to
the workers as two tensors (sgrun/engine/parts/step_broadcast.py); every rank then runs its shard's layers, all-reducing after each row-parallel
projection, so every rank ends the step with the same hidden states; only rank 0 computes logits.
Page ids mean the same thing on every rank (same page count and page size), so the workers keep
no cache bookkeeping of their own.

Rank 0 starts ranks 1..N-1 as `python -m sgrun.engine.stages.tp_worker ...` processes with their
WorkerSpec on the command line (tp_worker.py), never by re-importing the caller's program, so
any caller works: a script, stdin, a notebook.

Backends: gloo on CPU, NCCL on CUDA. A rank that dies or stops answering makes the next
collective fail (gloo notices a closed peer at once; a silent one after `timeout` seconds), and
rank 0 turns that into a TensorParallelFailure naming the rank: the engine then stops with that
error instead of hanging.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from sgrun.child_process import free_port
from sgrun.engine.parts.step_broadcast import StepMessage, send_stop, send_step
from sgrun.engine.stages.tp_worker import WorkerSpec, build_shard, load_full_model
from sgrun.errors import EngineFatalError, SgrunError
from sgrun.models.llama import LlamaModel

# How long a failed collective waits for a peer's exit to show, so the error names the dead rank.
EXIT_GRACE_S = 2.0


class TensorParallelFailure(EngineFatalError):
    """A tensor-parallel rank died or stopped answering; the engine cannot go on."""


class CollectiveTimer:
    """Rank 0's all-reduce, timed: seconds spent in collectives (with `sync`, CUDA work is
    waited for on both sides, so the figure is the communication itself; for checks only)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.sync = False

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        cuda = self.sync and t.is_cuda
        if cuda:
            torch.cuda.synchronize(t.device)
        t0 = time.perf_counter()
        dist.all_reduce(t)
        if cuda:
            torch.cuda.synchronize(t.device)
        self.seconds += time.perf_counter() - t0
        return t


_STARTED: list[subprocess.Popen] = []   # every worker this process started (running_workers)


def running_workers() -> list[subprocess.Popen]:
    """The worker processes this process started that are still running (checks, tests)."""
    _STARTED[:] = [p for p in _STARTED if p.poll() is None]
    return list(_STARTED)


def start_worker(spec: WorkerSpec, ready_fd: int) -> subprocess.Popen:
    """Rank `spec.rank` as a fresh `python -m sgrun.engine.stages.tp_worker` process importing this
    sgrun (its folder first on PYTHONPATH), reporting on `ready_fd`; its output is ours."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[3])   # the folder holding this sgrun package
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    argv = [sys.executable, "-m", "sgrun.engine.stages.tp_worker", *spec.argv(), "--ready-fd", str(ready_fd)]
    proc = subprocess.Popen(argv, env=env, pass_fds=(ready_fd,), stdin=subprocess.DEVNULL)
    _STARTED.append(proc)
    return proc


class ReadyPipe:
    """One pipe every worker writes its `rank<TAB>error` line to (tp_worker.ready_reporter)."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self._buf = b""

    def close_write_end(self) -> None:
        """After the workers started: only they hold the write end now."""
        with contextlib.suppress(OSError):
            os.close(self.write_fd)

    def get(self, timeout: float) -> tuple[int, str | None] | None:
        """The next (rank, error or None), or None when nothing came within `timeout`."""
        while b"\n" not in self._buf:
            readable, _, _ = select.select([self.read_fd], [], [], timeout)
            if not readable:
                return None
            chunk = os.read(self.read_fd, 4096)
            if not chunk:   # every worker closed its end: the dead-rank check says why
                time.sleep(timeout)
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        rank, _, error = line.decode(errors="replace").partition("\t")
        return int(rank), (error or None)

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.read_fd)


class TensorParallelGroup:
    """Rank 0's side: starts the workers, joins the process group, broadcasts steps."""

    def __init__(self, model_path: str, dtype: torch.dtype, quantization: str, world: int, num_pages: int,
                 page_size: int,
                 num_threads: int | None = None, timeout_s: float = 60.0, device: str = "cpu",
                 start_timeout_s: float = 600.0):
        """Spawns ranks 1..world-1 on this machine, or, under torchrun (RANK=0 in the
        environment), joins the group torchrun set up with workers started elsewhere."""
        if dist.is_initialized():
            raise SgrunError("a tensor-parallel engine is already running in this process; close it first")
        self.world = world
        self.timeout_s = timeout_s
        self.procs: list[subprocess.Popen] = []   # ranks 1..world-1, in order
        self.closed = False
        self.broadcast_seconds = 0.0   # rank 0's time sending step metadata (communication, with all-reduces)
        self.steps = 0
        backend = "nccl" if device.startswith("cuda") else "gloo"
        self.comm_device = torch.device(device if backend == "nccl" else "cpu")   # where broadcasts live
        timeout = datetime.timedelta(seconds=timeout_s)
        if "RANK" in os.environ and "MASTER_ADDR" in os.environ:
            if int(os.environ.get("WORLD_SIZE", "1")) != world:
                raise SgrunError(f"tp={world} does not match torchrun's WORLD_SIZE={os.environ.get('WORLD_SIZE')}")
            dist.init_process_group(backend, init_method="env://", rank=0, world_size=world, timeout=timeout)
        else:
            init_method = f"tcp://127.0.0.1:{free_port()}"
            threads = num_threads or max(1, (os.cpu_count() or 1) // world)
            ready = ReadyPipe()
            try:
                for rank in range(1, world):
                    spec = WorkerSpec(model_path, dtype, quantization, rank, world, init_method, threads, timeout_s,
                                      backend, f"cuda:{rank}" if backend == "nccl" else device)
                    self.procs.append(start_worker(spec, ready.write_fd))
            finally:
                ready.close_write_end()
            try:
                self._wait_ready(ready, start_timeout_s)
                dist.init_process_group(backend, init_method=init_method, rank=0, world_size=world, timeout=timeout)
            except BaseException:
                self._kill()
                raise
        try:
            dist.broadcast_object_list([(num_pages, page_size)], src=0)
        except Exception as exc:  # noqa: BLE001
            self._kill()
            raise TensorParallelFailure(self.describe(cause=exc)) from exc

    def _wait_ready(self, ready: Any, timeout_s: float) -> None:
        pending = set(range(1, self.world))
        deadline = time.monotonic() + timeout_s
        while pending:
            got = ready.get(timeout=0.5)
            if got is None:   # nothing yet: check the workers are still alive
                dead = self.dead_ranks()
                if dead:
                    raise TensorParallelFailure(self.describe(dead)) from None
                if time.monotonic() > deadline:
                    raise TensorParallelFailure(f"tensor-parallel ranks {sorted(pending)} did not load the model "
                                                f"within {timeout_s:.0f} s") from None
                continue
            rank, error = got
            if error is not None:
                raise TensorParallelFailure(f"tensor-parallel rank {rank} could not start: {error}")
            pending.discard(rank)

    def dead_ranks(self, grace_s: float = 0.0) -> list[tuple[int, int | None]]:
        """(rank, exit code) of the workers that exited. `grace_s`: after a collective failed, wait
        up to that long for one to show as exited: a killed peer's sockets close, and rank 0's
        collective fails, a moment before its exit can be read (seen under load)."""
        deadline = time.monotonic() + grace_s
        while True:
            dead = [(i + 1, p.returncode) for i, p in enumerate(self.procs) if p.poll() is not None]
            if dead or time.monotonic() >= deadline:
                return dead
            time.sleep(0.02)

    def describe(self, dead: list[tuple[int, int | None]] | None = None, cause: BaseException | None = None) -> str:
        dead = self.dead_ranks(EXIT_GRACE_S if cause is not None else 0.0) if dead is None else dead
        if dead:
            rank, code = dead[0]
            return (f"tensor-parallel rank {rank} exited (code {code}); the engine has stopped: "
                    "restart it (see that rank's log for why it died)")
        why = f" ({type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''})" if cause else ""
        return (f"a tensor-parallel collective failed or timed out (timeout {self.timeout_s:.0f} s){why}; the "
                "engine has stopped: restart it")

    def broadcast_step(self, msg: StepMessage) -> None:
        t0 = time.perf_counter()
        try:
            send_step(msg, self.comm_device)
            self.broadcast_seconds += time.perf_counter() - t0
            self.steps += 1
        except Exception as exc:  # noqa: BLE001 - any collective failure ends the engine
            raise TensorParallelFailure(self.describe(cause=exc)) from exc

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if not self.dead_ranks():
            with contextlib.suppress(Exception):
                send_stop(self.comm_device)
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        self._kill()
        with contextlib.suppress(Exception):
            dist.destroy_process_group()

    def _kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)


class RecordingAttention:
    """Wraps rank 0's attention backend to keep what `prepare` was given, so the same batch
    metadata can be broadcast to the other ranks."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.last: tuple[torch.Tensor, torch.Tensor, list[Any]] | None = None

    def prepare(self, write_pages: torch.Tensor, write_offsets: torch.Tensor, segments: list[Any]) -> None:
        self.last = (write_pages, write_offsets, segments)
        self.inner.prepare(write_pages, write_offsets, segments)

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.inner.forward(layer, q, k, v)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class TensorParallelModel:
    """Rank 0's model: broadcasts each step to the workers, then runs its own shard. Same
    forward signature as LlamaModel, so the model runner does not know the difference."""

    def __init__(self, shard: LlamaModel, group: TensorParallelGroup):
        self.shard, self.group = shard, group
        self.cfg = shard.cfg                   # the LOCAL config: heads and KV heads of rank 0's shard
        self.dtype = shard.dtype

    @staticmethod
    def wrap_attention(attn: Any) -> RecordingAttention:
        """What the model runner hands this model instead of its attention backend
        (engine_builder.py passes it as ModelRunner's `wrap_attention`): rank 0 records each
        batch's metadata there to broadcast it."""
        return RecordingAttention(attn)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: RecordingAttention,
                logit_rows: torch.Tensor) -> torch.Tensor:
        assert attn.last is not None, "prepare() must run before forward()"
        pages, offsets, segments = attn.last
        on_device = input_ids.device.type != "cpu"
        if on_device:   # the message is packed on the CPU (page tables are built there anyway)
            segments = [dataclasses.replace(seg, pages=seg.pages.cpu()) for seg in segments]
        self.group.broadcast_step(StepMessage(input_ids.cpu(), positions.cpu(), pages.cpu(), offsets.cpu(), segments,
                                              on_device))
        try:
            return self.shard.forward(input_ids, positions, attn, logit_rows)
        except Exception as exc:
            # A collective inside the layers failed (a rank died or timed out): fatal. Any other
            # error is the model's own and goes up unchanged.
            if isinstance(exc, getattr(dist, "DistError", ())) or self.group.dead_ranks(EXIT_GRACE_S):
                raise TensorParallelFailure(self.group.describe(cause=exc)) from exc
            raise

    def comm_stats(self) -> dict[str, float]:
        """Communication per forward on rank 0: metadata broadcast + all-reduces, in seconds."""
        reduce_s = getattr(self.shard.all_reduce, "seconds", 0.0)
        steps = max(1, self.group.steps)
        return {"tp_steps": self.group.steps, "tp_broadcast_seconds": self.group.broadcast_seconds,
                "tp_all_reduce_seconds": reduce_s,
                "tp_comm_seconds_per_step": (self.group.broadcast_seconds + reduce_s) / steps}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shard, name)


def load_rank0_shard(model: str | os.PathLike | None, dtype: torch.dtype, quantization: str, world: int,
                     device: str | torch.device = "cpu"):
    """Rank 0's shard: (shard model, full config, tokenizer, model path, quantization). The files
    are read once; only this rank's slice of the weights is kept."""
    from sgrun.models.fetch import resolve_model_path
    from sgrun.models.loader import stored_quantization
    from sgrun.models.random_model import is_random_spec

    if is_random_spec(model):
        path, quantization = str(model), ("none" if quantization == "auto" else quantization)
    else:
        path = str(resolve_model_path(model).resolve())
        if quantization == "auto":
            quantization = stored_quantization(path)
    cfg, weights, tokenizer, path = load_full_model(path, dtype, device)
    shard, _ = build_shard(cfg, weights, 0, world, dtype, quantization, device)
    shard.all_reduce = CollectiveTimer()
    return shard, cfg, tokenizer, path, quantization
