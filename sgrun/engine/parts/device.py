"""Where the engine runs: the device setting, and how much of that device the KV pool gets.

`resolve_device("auto")` is CUDA when a CUDA device is present, else the CPU; "cuda" and
"cuda:N" must exist. On CUDA the pool is sized like SGLang's `mem_fraction_static`: of the
device's total memory, `mem_fraction` may hold weights + KV pool; from that, what is already
in use (the weights, measured) and a measured activation/graph reserve are subtracted, and the
rest becomes pages. On the CPU the pool is `memory_gb` of host memory, as before.

The choices made here, each a function engine_builder.py calls in this order: `resolve_device`,
`wants_cuda_graphs`, `plan_pool` (the dtype is models/loader.py's `resolve_dtype`, the compiled
forward compile_policy.py's `start_compile`, the attention backend
attention/choice.py's `default_backend`). The CLI flags for them are sgrun/cli_flags.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sgrun.kernels.cpu.pool_dtypes import pool_dtypes_under
from sgrun.errors import InvalidRequestError

DEFAULT_MEM_FRACTION = 0.85
# Kept back on top of the measured activation peak: CUDA graphs' private pool, cuBLAS
# workspaces, the sampler's [batch, vocab] temporaries, allocator fragmentation.
GRAPH_AND_SLACK_BYTES = 1 << 30


def resolve_device(spec: str | torch.device | None) -> torch.device:
    """"auto" (or None), "cpu", "cuda", "cuda:N" -> a torch.device that exists here."""
    if isinstance(spec, torch.device):
        spec = str(spec)
    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise InvalidRequestError(f"device {spec!r} asked for, but this machine has no CUDA device "
                                      "(or torch was built without CUDA): use device='cpu' or 'auto'",
                                      field="device")
        index = torch.cuda.current_device() if spec == "cuda" else spec.split(":", 1)[1]
        if not str(index).isdigit() or int(index) >= torch.cuda.device_count():
            raise InvalidRequestError(f"device {spec!r} does not exist: this machine has "
                                      f"{torch.cuda.device_count()} CUDA device(s), cuda:0 to "
                                      f"cuda:{torch.cuda.device_count() - 1}", field="device")
        return torch.device("cuda", int(index))
    raise InvalidRequestError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N'; got {spec!r}", field="device")


_KV_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
              "float16": torch.float16, "fp16": torch.float16}


def resolve_kv_dtype(kv_cache_dtype: str | torch.dtype, dtype: torch.dtype, device: torch.device, tp: int,
                     backend: str) -> torch.dtype:
    """The KV pool's dtype. "auto": on the CPU the auto table's choice for a `dtype` model at the
    level in force (models/auto_config.py: float16 or bf16 pages under a float32 model), elsewhere the
    model's dtype. A bf16 or float16 pool under a float32 model is a feature of the CPU attention backends
    (cpp, torch) in one process: the Triton kernels and the tensor-parallel workers keep the
    model's dtype."""
    mixed_ok = device.type == "cpu" and tp == 1 and backend in ("cpp", "torch")
    if kv_cache_dtype == "auto":
        if not mixed_ok:
            return dtype
        from sgrun.models.auto_config import auto_kv_dtype
        return auto_kv_dtype(dtype)
    kv = kv_cache_dtype if isinstance(kv_cache_dtype, torch.dtype) else (
        _KV_DTYPES.get(kv_cache_dtype) if isinstance(kv_cache_dtype, str) else None)
    if kv is None:
        raise InvalidRequestError(f"kv_cache_dtype must be one of auto, {', '.join(_KV_DTYPES)}; got {kv_cache_dtype!r}",
                                  field="kv_cache_dtype")
    if kv == dtype or (kv in pool_dtypes_under(dtype) and mixed_ok):
        return kv
    raise InvalidRequestError(
        f"kv_cache_dtype {kv_cache_dtype!r} with a {str(dtype).removeprefix('torch.')} model on {device.type}"
        f"{' with tp > 1' if tp > 1 else ''} (attention backend {backend}): the KV cache holds the model's dtype "
        f"there; bfloat16 or float16 under a float32 model needs the CPU's cpp or torch backend and tp=1. "
        f"Use kv_cache_dtype='auto'", field="kv_cache_dtype")


def wants_cuda_graphs(cuda_graph: bool | None, device: torch.device, backend: str) -> bool:
    """CUDA graphs by default on CUDA with the Triton backend; asked for elsewhere: refused."""
    possible = device.type == "cuda" and backend == "triton"
    if cuda_graph and not possible:
        raise InvalidRequestError("cuda_graph needs a CUDA device and the Triton attention backend",
                                  field="cuda_graph")
    return possible if cuda_graph is None else bool(cuda_graph)


@dataclass
class PoolBudget:
    num_pages: int
    total_bytes: int       # device memory
    in_use_bytes: int      # before the pool: weights and everything else already allocated
    reserve_bytes: int     # measured activation peak + graph/slack reserve
    pool_bytes: int


def cuda_pool_pages(device: torch.device, bytes_per_page: int, mem_fraction: float,
                    activation_peak_bytes: int) -> PoolBudget:
    """Pages that fit in `mem_fraction` of the device after what is in use and the reserve."""
    if not 0.0 < mem_fraction <= 1.0:
        raise InvalidRequestError(f"mem_fraction must be in (0, 1], got {mem_fraction}", field="mem_fraction")
    free, total = torch.cuda.mem_get_info(device)
    in_use = total - free
    reserve = activation_peak_bytes + GRAPH_AND_SLACK_BYTES
    budget = int(total * mem_fraction) - in_use - reserve
    pages = budget // bytes_per_page
    if pages < 4:
        raise InvalidRequestError(
            f"no room for a KV pool on {device}: {in_use / 2**30:.1f} GiB in use (weights), "
            f"{reserve / 2**30:.1f} GiB reserved for activations, {mem_fraction:.2f} of "
            f"{total / 2**30:.1f} GiB allowed: raise mem_fraction or use a smaller model/dtype",
            field="mem_fraction")
    return PoolBudget(int(pages), total, in_use, reserve, int(pages) * bytes_per_page)


def tensors_of(obj: object) -> list[torch.Tensor]:
    """Every tensor attribute of a model-like object (lists and dataclass fields included)."""
    out: list[torch.Tensor] = []
    stack = [vars(obj)]
    while stack:
        cur = stack.pop()
        values = cur.values() if isinstance(cur, dict) else cur
        for v in values:
            if isinstance(v, torch.Tensor):
                out.append(v)
            elif isinstance(v, (list, tuple)):
                stack.append(v)
            elif hasattr(v, "__dataclass_fields__"):
                stack.append(vars(v))
    return out


@torch.inference_mode()
def measure_activation_peak(model, page_size: int, max_batch_tokens: int, backend: str | None) -> int:
    """Bytes one full-size prefill forward (max_batch_tokens tokens, the largest the scheduler
    builds) allocates beyond its inputs, measured on a throwaway pool just big enough."""
    with torch.cuda.device(model.device):
        return _measure_activation_peak(model, page_size, max_batch_tokens, backend)


def _measure_activation_peak(model, page_size: int, max_batch_tokens: int, backend: str | None) -> int:
    from sgrun.engine.parts.attention.backend import Segment
    from sgrun.engine.parts.attention.choice import make_attention_backend
    from sgrun.engine.state.page_pool import PagePool
    cfg, dev = model.cfg, model.device
    pages = -(-max_batch_tokens // page_size)
    pool = PagePool(cfg.num_layers, pages, page_size, cfg.num_kv_heads, cfg.head_dim, model.dtype, dev)
    attn = make_attention_backend(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, backend=backend)
    positions = torch.arange(max_batch_tokens)
    table = torch.arange(pages)
    attn.prepare(table[positions // page_size], positions % page_size,
                 [Segment(q_start=0, q_len=max_batch_tokens, ctx_len=max_batch_tokens, pages=table)])
    ids = torch.zeros(max_batch_tokens, dtype=torch.long, device=dev)
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    base = torch.cuda.memory_allocated(dev)
    model.forward(ids, positions.to(dev), attn, torch.tensor([max_batch_tokens - 1], device=dev))
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev) - base
    del pool, attn
    torch.cuda.empty_cache()
    return int(peak)


def plan_pool(model, device: torch.device, page_size: int, bytes_per_page: int, max_pages: int | None,
              memory_gb: float | None, mem_fraction: float | None, max_batch_tokens: int,
              backend: str | None, default_memory_gb: float) -> tuple[int, PoolBudget | None]:
    """(pages, budget): explicit max_pages or memory_gb win; on CUDA the rest of mem_fraction
    after the weights and the measured reserve; on other devices default_memory_gb."""
    if max_pages is not None:
        return max_pages, None
    if memory_gb is not None or device.type != "cuda":
        return max(4, int((memory_gb or default_memory_gb) * (1 << 30) // bytes_per_page)), None
    peak = measure_activation_peak(model, page_size, max_batch_tokens, backend)
    budget = cuda_pool_pages(device, bytes_per_page, mem_fraction or DEFAULT_MEM_FRACTION, peak)
    return budget.num_pages, budget
