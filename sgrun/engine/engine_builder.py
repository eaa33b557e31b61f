"""Building an Engine: the options it is made from, and the parts made from them.

`EngineOptions` is where `sgrun.Engine(...)`'s keyword arguments are written, once (names,
defaults; Engine's signature is made from it), and `build_engine_parts` turns them into what the
running engine owns: the model (one process, or rank 0's shard plus the tensor-parallel workers),
the KV page pool and radix cache, the speculation and the scheduler that asks it for drafts, the
compiled decode forward, the model runner with its attention backend and CUDA graphs, and the
step pipeline's depth. engine.py only runs these parts; the order below is the order of the
checks a user sees fail first (speculation, tp, device, dtype, then loading).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from sgrun.engine.parts.attention.choice import default_backend
from sgrun.engine.parts.compile_policy import start_compile
from sgrun.engine.parts.device import PoolBudget, plan_pool, resolve_device, resolve_kv_dtype, wants_cuda_graphs
from sgrun.engine.state.model_like import ModelLike
from sgrun.engine.stages.model_runner import ModelRunner
from sgrun.engine.parts.ngram_draft import SpeculativeConfig
from sgrun.engine.state.page_pool import PagePool
from sgrun.engine.state.radix_cache import RadixCache
from sgrun.engine.stages.scheduler import Scheduler
from sgrun.engine.stages.speculative import Speculation
from sgrun.engine.pipeline.step import drafts_possible
from sgrun.errors import InvalidRequestError
from sgrun.kernels.cpu.prebuild import start_builds
from sgrun.models.compiled_forward import CompiledForward
from sgrun.models.fused_decode import FusedDecode, fused_decode_for
from sgrun.models.llama import LlamaModel
from sgrun.models.loader import load_model, resolve_dtype

if TYPE_CHECKING:   # type names only: the CUDA-graph runner imports Triton, tp_group torch.distributed
    from sgrun.engine.parts.cuda_graph_runner import CaptureReport
    from sgrun.engine.pipeline.tp_group import TensorParallelGroup
    from sgrun.models.config import ModelConfig
    from sgrun.models.tokenizer import Tokenizer

DEFAULT_KV_MEMORY_GB = 2.0


@dataclass(frozen=True)
class EngineOptions:
    """`sgrun.Engine(...)`'s keyword arguments, documented in docs/interfaces.md: the one place
    they are written (Engine's signature is made from these fields)."""
    model: str | os.PathLike | None = None
    dtype: str | torch.dtype = "auto"
    kv_cache_dtype: str | torch.dtype = "auto"
    num_threads: int | None = None
    page_size: int = 16
    max_pages: int | None = None
    memory_gb: float | None = None
    max_running: int = 64
    max_batch_tokens: int = 2048
    enable_prefix_cache: bool = True
    cache_fraction: float | None = None
    max_context: int | None = None
    debug_checks: bool = False
    quantization: str = "auto"
    device: str = "auto"
    attention_backend: str | None = None
    mem_fraction: float | None = None
    cuda_graph: bool | None = None
    overlap: bool | None = None
    tp: int = 1
    tp_timeout: float = 60.0
    speculative_ngram: bool = False
    speculative_num_draft: int = 6
    speculative_ngram_max: int = 3
    speculative_ngram_min: int = 2
    cascade_attention: bool = True
    compile: bool | None = None
    # A one-shot run of this many tokens (`sgrun generate`): with compile=None the forward is
    # compiled before start only where a warm compile pays for them (compile_policy.one_shot_compile).
    one_shot_tokens: int | None = None

    def speculative_config(self) -> SpeculativeConfig:
        return SpeculativeConfig(self.speculative_ngram, self.speculative_num_draft, self.speculative_ngram_max,
                                 self.speculative_ngram_min).validated()

    def checked_tp(self) -> int:
        tp = self.tp
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise InvalidRequestError(f"tp must be a whole number >= 1, got {tp!r}", field="tp")
        return tp


def options_with(options: EngineOptions | None, model: str | os.PathLike | None,
                 overrides: dict[str, Any]) -> EngineOptions:
    """`options` (or the defaults) with `model` and the keyword overrides applied; an unknown
    keyword is refused by name, as a Python signature would."""
    names = {f.name for f in dataclasses.fields(EngineOptions)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise TypeError(f"Engine() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                        f"the keywords are EngineOptions' fields: {', '.join(sorted(names))}")
    base = options if options is not None else EngineOptions()
    if model is not None:
        overrides = {**overrides, "model": model}
    return dataclasses.replace(base, **overrides) if overrides else base


def options_signature() -> inspect.Signature:
    """`Engine(self, model=None, options=None, *, <every other EngineOptions field>)`: help(sgrun.Engine),
    editors and inspect.signature show every keyword with its default, written once."""
    return inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
         inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
         inspect.Parameter("options", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)]
        + [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
           for f in dataclasses.fields(EngineOptions) if f.name != "model"])


@dataclass
class EngineParts:
    """Everything an Engine runs, built once at start-up (`engine.parts`). Each stage is handed
    the parts it needs, never the Engine."""
    device: torch.device
    dtype: torch.dtype
    tp: int
    tp_group: TensorParallelGroup | None   # with tp > 1
    model: ModelLike         # LlamaModel, or TensorParallelModel wrapping rank 0's shard
    tokenizer: Tokenizer
    model_path: str
    config: ModelConfig      # the full model's (with tp, model.cfg is rank 0's shard's)
    quantization: str
    pool: PagePool
    pool_budget: PoolBudget | None
    cache: RadixCache | None
    max_context: int
    speculative: SpeculativeConfig
    speculation: Speculation
    scheduler: Scheduler
    compiled: CompiledForward | None
    fused: FusedDecode | None        # the C++ decode blocks (fused_decode.py), where they serve the model
    compile_s: float | None
    runner: ModelRunner
    graph_report: CaptureReport | None
    pipeline_depth: int      # 0: plain steps; 1: overlap scheduling (step.py)


def build_engine_parts(o: EngineOptions) -> EngineParts:
    if o.num_threads is not None:
        torch.set_num_threads(int(o.num_threads))
    spec = o.speculative_config()
    tp = o.checked_tp()
    device = resolve_device(o.device)
    dtype = resolve_dtype(o.dtype, device)
    backend = o.attention_backend or default_backend(device)
    kv_dtype = resolve_kv_dtype(o.kv_cache_dtype, dtype, device, tp, backend)
    use_graphs = wants_cuda_graphs(o.cuda_graph, device, backend) and tp == 1
    quantization = o.quantization
    if device.type != "cpu" and quantization == "auto":
        quantization = "none"   # the int8/int4 linears are CPU kernels; GPUs run the dense dtype
    if device.type == "cpu":   # the kernel builds of a first start run side by side (prebuild.py)
        start_builds(attention=backend == "cpp")
    if tp == 1:
        model, tokenizer, model_path = load_model(o.model, dtype, quantization, device)
        cfg = model.cfg
    else:   # rank 0's shard; the pool below holds only its KV heads (tensor_parallel.py)
        from sgrun.engine.pipeline.tp_group import load_rank0_shard
        model, cfg, tokenizer, model_path, _ = load_rank0_shard(o.model, dtype, quantization, tp, device)
    kv_heads = model.cfg.num_kv_heads          # this rank's (all of them without tp)
    per_page = PagePool.bytes_per_page(cfg.num_layers, o.page_size, kv_heads, cfg.head_dim, kv_dtype)
    max_pages, pool_budget = plan_pool(model, device, o.page_size, per_page, o.max_pages, o.memory_gb,
                                       o.mem_fraction, o.max_batch_tokens, backend, DEFAULT_KV_MEMORY_GB)
    pool = PagePool(cfg.num_layers, max_pages, o.page_size, kv_heads, cfg.head_dim, kv_dtype, device)
    quantization = model.quantization
    tp_group = None
    if tp > 1:
        from sgrun.engine.pipeline.tp_group import TensorParallelGroup, TensorParallelModel
        tp_group = TensorParallelGroup(model_path, dtype, quantization, tp, max_pages, o.page_size,
                                       o.num_threads, o.tp_timeout, device=str(device))
        model = TensorParallelModel(model, tp_group)
    try:
        cap = int(max_pages * o.cache_fraction) if o.cache_fraction is not None else None
        cache = RadixCache(pool, cap) if o.enable_prefix_cache else None
        max_context = min(cfg.max_position, max_pages * o.page_size, o.max_context or cfg.max_position)
        depth = int(device.type == "cuda" if o.overlap is None else bool(o.overlap))
        speculation = Speculation(spec, max_context, enabled=drafts_possible(depth))
        scheduler = Scheduler(pool, cache, o.max_running, o.max_batch_tokens,
                              speculation.draft_for if drafts_possible(depth) else None)
        fused = _fused_decode(model) if device.type == "cpu" and tp == 1 and isinstance(model, LlamaModel) else None
        compiled, compile_s = start_compile(model, device, o.compile, tp, fused_serves=fused is not None,
                                            one_shot_tokens=o.one_shot_tokens)
        runner = ModelRunner(model, pool, tokenizer.eos_token_ids, attention_backend=backend,
                             cascade_attention=o.cascade_attention, compiled=compiled, fused=fused,
                             wrap_attention=model.wrap_attention if tp_group is not None else None)
        graph_report = runner.capture_cuda_graphs(o.max_running, max_context) if use_graphs else None
    except BaseException:
        if tp_group is not None:   # e.g. compile=True with tp=2: the started workers must not outlive it
            tp_group.close()
        raise
    return EngineParts(device=device, dtype=dtype, tp=tp, tp_group=tp_group, model=model, tokenizer=tokenizer,
                       model_path=model_path, config=cfg, quantization=quantization, pool=pool,
                       pool_budget=pool_budget, cache=cache, max_context=max_context, speculative=spec,
                       speculation=speculation, scheduler=scheduler, compiled=compiled, compile_s=compile_s, fused=fused,
                       runner=runner, graph_report=graph_report, pipeline_depth=depth)


def _fused_decode(model: LlamaModel) -> FusedDecode | None:
    """The C++ decode blocks where they serve the model: any llama-shaped one (ModelConfig.llama_shaped),
    and another architecture of the family once fused_decode.py lists it in `FAMILY_ARCHS`; the
    others run the eager family forward (decoder.py), the reference."""
    from sgrun.models import fused_decode
    if model.cfg.llama_shaped or model.cfg.arch in getattr(fused_decode, "FAMILY_ARCHS", ()):
        return fused_decode_for(model)
    return None
