"""What `Engine.startup_report()` says: where the engine runs and what start-up measured, read
off the built parts (engine_builder.py): the device, the attention backend, the pool sizing
(CUDA), the compile warm-up (or that it runs in the background), what kernels run (models/auto_config.py)
and the CUDA-graph capture time and memory."""

from __future__ import annotations

from sgrun.engine.engine_builder import EngineParts
from sgrun.models.auto_config import kernels_summary


def startup_report(parts: EngineParts) -> dict:
    """The device, the backend, the pool sizing (CUDA) and the CUDA-graph capture time/memory."""
    out: dict = {"device": str(parts.device), "dtype": str(parts.dtype).replace("torch.", ""),
                 "kv_cache_dtype": str(parts.pool.k[0].dtype).replace("torch.", ""),
                 "attention_backend": parts.runner.backend, "overlap": parts.pipeline_depth > 0,
                 "kv_pages": parts.pool.num_pages, "page_size": parts.pool.page_size}
    if parts.pool_budget is not None:
        b = parts.pool_budget
        out.update(device_total_gib=b.total_bytes / 2**30, in_use_before_pool_gib=b.in_use_bytes / 2**30,
                   activation_reserve_gib=b.reserve_bytes / 2**30, kv_pool_gib=b.pool_bytes / 2**30)
    if parts.compiled is not None:
        ready = parts.compiled.ready
        out.update(compile=True if parts.compile_s is not None else "background",
                   compile_ready=ready, **({"compile_warm_up_s": parts.compiled.warm_up_s} if ready else {}))
    else:
        out.update(compile=False)
    out.update(decode_blocks="sgrun C++" if parts.fused is not None else "torch")
    if parts.fused is not None:
        out.update(weight_pages=parts.fused.huge_pages.summary())
    out.update(kernels_summary(parts))
    if parts.graph_report is not None:
        g = parts.graph_report
        out.update(cuda_graph_sizes=g.sizes, cuda_graph_capture_s=g.seconds, cuda_graph_memory_mib=g.memory_bytes / 2**20)
    return out
