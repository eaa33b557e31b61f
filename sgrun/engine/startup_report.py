"""What `Engine.startup_report()` says: where the engine runs and what start-up measured, read
off the built parts (engine_builder.py): the device, the attention backend, the pool sizing
(CUDA), the compile warm-up (or that it runs in the background), what kernels run (the CPU
level, the weights' format (models/auto_config.py), the attention kernels) and the CUDA-graph
capture time and memory; and `startup_line`, the one line `sgrun generate` and `sgrun serve`
print from that report."""

from __future__ import annotations

from typing import Any

from sgrun.engine.parts.attention.cpp_backend import CppPagedAttention
from sgrun.engine.engine_builder import EngineParts
from sgrun.models.auto_config import cpu_level, weight_format


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


def kernels_summary(parts: EngineParts) -> dict:
    """What runs: the CPU level, the weights' format, the attention kernels."""
    out = {"cpu_level": cpu_level() if parts.device.type == "cpu" else "cuda",
           "weights": weight_format(parts.model) if hasattr(parts.model, "layers") else parts.quantization,
           "decode_attention": parts.runner.backend}
    if isinstance(parts.runner.kernels, CppPagedAttention):
        out["prefill_attention"] = parts.runner.kernels.prefill_kernel(parts.dtype)
    return out


def startup_line(report: dict[str, Any]) -> str:
    """One line naming what runs (from `startup_report`): level, dtype, weights, kernels, compile."""
    r = report
    compile_state = {True: "on", False: "off", "background": "on (compiling in the background)"}[r["compile"]]
    attn = r["decode_attention"] + (f", prefill {r['prefill_attention']}" if "prefill_attention" in r else "")
    return (f"cpu level {r['cpu_level']}, dtype {r['dtype']}, kv cache {r['kv_cache_dtype']}, weights {r['weights']}, "
            f"attention {attn}, decode blocks {r.get('decode_blocks', 'torch')}, compile {compile_state}")
