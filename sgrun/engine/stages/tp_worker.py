"""A tensor-parallel worker rank (ranks 1..N-1): sgrun's own entry point for the processes rank 0
starts, `python -m sgrun.engine.stages.tp_worker --model-path ... --rank 1 ...`.

Rank 0 (tp_group.py) starts each worker as a fresh interpreter running this module with its
WorkerSpec on the command line, so nothing of the caller's program is imported again: an
`Engine(tp=2)` works from a script without a `__main__` guard, from `python - <<EOF` (stdin), and
from a notebook. A worker loads and shards the model itself (random:<preset> weights are seeded,
the same on every rank), says on the ready pipe (`--ready-fd`) that it loaded or why not, joins
the process group, and runs forwards over its shard until rank 0 says stop. Under torchrun the
same `worker_main` runs from `sgrun serve --tp N` (`torchrun_spec`).

May import: sgrun.models (loading, sharding), the engine's page pool, attention backends and
step broadcast. Never tp_group.py, never the engine above it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from sgrun.child_process import die_with_parent
from sgrun.engine.parts.step_broadcast import receive_step
from sgrun.errors import SgrunError
from sgrun.models.llama import LlamaModel
from sgrun.models.tensor_parallel import ShardPlan, plan_shard, shard_weights


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker rank is told: by rank 0 on its command line, or by torchrun's environment."""
    model_path: str
    dtype: torch.dtype
    quantization: str
    rank: int
    world: int
    init_method: str                          # tcp://host:port, or env:// under torchrun
    num_threads: int
    timeout_s: float
    backend: str
    device: str

    def argv(self) -> list[str]:
        """This spec as `python -m sgrun.engine.stages.tp_worker` arguments (parse_spec reads them back)."""
        return ["--model-path", self.model_path, "--dtype", str(self.dtype).removeprefix("torch."),
                "--quantization", self.quantization, "--rank", str(self.rank), "--world", str(self.world),
                "--init-method", self.init_method, "--num-threads", str(self.num_threads),
                "--timeout", repr(self.timeout_s), "--backend", self.backend, "--device", self.device]


def _all_reduce(t: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(t)
    return t


def build_shard(cfg, weights: dict[str, torch.Tensor], rank: int, world: int, dtype: torch.dtype,
                quantization: str = "none", device: str | torch.device = "cpu") -> tuple[LlamaModel, ShardPlan]:
    plan = plan_shard(cfg, rank, world)
    model = LlamaModel(plan.local_config(cfg), shard_weights(cfg, weights, plan), dtype, quantization, device)
    model.all_reduce = _all_reduce
    return model, plan


def load_full_model(model: str | os.PathLike | None, dtype: torch.dtype, device: str | torch.device = "cpu"):
    """(config, full weights, tokenizer, path): a file, or a "random:<preset>" model whose seeded
    weights are the same on every rank."""
    from sgrun.models.loader import load_model_files
    from sgrun.models.random_model import is_random_spec, preset_config, random_weights, synthetic_tokenizer

    if is_random_spec(model):
        cfg = preset_config(str(model))
        return cfg, random_weights(cfg, device=device, dtype=dtype), synthetic_tokenizer(cfg.vocab_size), str(model)
    loaded = load_model_files(model, torch.float32)
    return loaded.config, loaded.weights, loaded.tokenizer, loaded.path


def worker_main(spec: WorkerSpec, ready: Callable[[int, str | None], None] | None = None) -> None:
    """Ranks 1..N-1: load and shard the model, join the group, take the pool's shape from rank 0,
    then run forwards until rank 0 says stop. `ready(rank, error)` (workers rank 0 started) tells
    rank 0 that loading worked, or why it did not."""
    die_with_parent()
    try:
        from sgrun.engine.parts.attention.choice import make_attention_backend
        from sgrun.engine.state.page_pool import PagePool
        torch.set_num_threads(spec.num_threads)
        cfg, weights, _, _ = load_full_model(spec.model_path, spec.dtype, spec.device)
        model, plan = build_shard(cfg, weights, spec.rank, spec.world, spec.dtype, spec.quantization, spec.device)
        del weights
    except BaseException as exc:  # noqa: BLE001 - reported to rank 0, which raises it
        if ready is None:
            raise
        ready(spec.rank, f"{type(exc).__name__}: {exc}")
        return
    if ready is not None:
        ready(spec.rank, None)
    dist.init_process_group(spec.backend, init_method=spec.init_method, rank=spec.rank, world_size=spec.world,
                            timeout=datetime.timedelta(seconds=spec.timeout_s))
    empty = torch.empty(0, dtype=torch.long)
    try:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        num_pages, page_size = box[0]
        cfg = model.cfg
        pool = PagePool(cfg.num_layers, num_pages, page_size, cfg.num_kv_heads, cfg.head_dim, spec.dtype,
                        device=spec.device)
        attn = make_attention_backend(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
        comm_device = torch.device(spec.device if spec.backend == "nccl" else "cpu")
        while True:
            msg = receive_step(comm_device)
            if msg is None:
                break
            if msg.on_device:
                dev = torch.device(spec.device)
                for seg in msg.segments:
                    seg.pages = seg.pages.to(dev)
                msg.input_ids, msg.positions = msg.input_ids.to(dev), msg.positions.to(dev)
                msg.write_pages, msg.write_offsets = msg.write_pages.to(dev), msg.write_offsets.to(dev)
            attn.prepare(msg.write_pages, msg.write_offsets, msg.segments)
            model.forward(msg.input_ids, msg.positions, attn, empty)
    except Exception:  # noqa: BLE001 - rank 0 went away: nothing left to serve
        pass
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def torchrun_spec(model: str | os.PathLike | None, dtype: str | torch.dtype, quantization: str, world: int,
                  num_threads: int | None = None, timeout_s: float = 60.0) -> WorkerSpec | None:
    """This process's worker spec when torchrun started it as a rank other than 0 (RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment), else None."""
    if "RANK" not in os.environ or int(os.environ["RANK"]) == 0:
        return None
    if int(os.environ.get("WORLD_SIZE", "1")) != world:
        raise SgrunError(f"--tp {world} does not match torchrun's WORLD_SIZE={os.environ.get('WORLD_SIZE')}")
    from sgrun.models.fetch import resolve_model_path
    from sgrun.models.loader import resolve_dtype, stored_quantization

    from sgrun.models.random_model import is_random_spec

    if is_random_spec(model):
        path, quantization = str(model), ("none" if quantization == "auto" else quantization)
    else:
        path = str(resolve_model_path(model).resolve())
        quantization = stored_quantization(path) if quantization == "auto" else quantization
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    return WorkerSpec(path, resolve_dtype(dtype), quantization, int(os.environ["RANK"]), world, "env://",
                      num_threads or max(1, os.cpu_count() or 1), timeout_s,
                      "nccl" if cuda else "gloo", f"cuda:{local}" if cuda else "cpu")


def parse_spec(argv: list[str]) -> tuple[WorkerSpec, int | None]:
    """(the spec, the ready pipe's file descriptor) from WorkerSpec.argv() + `--ready-fd N`."""
    p = argparse.ArgumentParser(prog="python -m sgrun.engine.stages.tp_worker",
                                description="a tensor-parallel worker rank (started by rank 0)")
    p.add_argument("--model-path", required=True)
    p.add_argument("--dtype", required=True)
    p.add_argument("--quantization", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--init-method", required=True)
    p.add_argument("--num-threads", type=int, required=True)
    p.add_argument("--timeout", type=float, required=True)
    p.add_argument("--backend", required=True, choices=["gloo", "nccl"])
    p.add_argument("--device", required=True)
    p.add_argument("--ready-fd", type=int, default=None, help="pipe to report 'loaded' (or why not) on")
    a = p.parse_args(argv)
    dtype = getattr(torch, a.dtype, None)
    if not isinstance(dtype, torch.dtype):
        p.error(f"--dtype {a.dtype!r} is not a torch dtype")
    return WorkerSpec(a.model_path, dtype, a.quantization, a.rank, a.world, a.init_method, a.num_threads,
                      a.timeout, a.backend, a.device), a.ready_fd


def ready_reporter(fd: int) -> Callable[[int, str | None], None]:
    """Writes one line `rank<TAB>error` (empty error: loaded) to rank 0's ready pipe."""
    def report(rank: int, error: str | None) -> None:
        line = f"{rank}\t{(error or '').replace(chr(10), ' ')[:2000]}\n".encode()
        with contextlib.suppress(OSError):
            os.write(fd, line)
            os.close(fd)
    return report


def main(argv: list[str] | None = None) -> int:
    spec, ready_fd = parse_spec(sys.argv[1:] if argv is None else argv)
    worker_main(spec, ready_reporter(ready_fd) if ready_fd is not None else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
