"""The engine's command-line flags, shared by `sgrun generate` and `sgrun serve`: the device
flags (device, attention backend, CUDA graphs, compile, overlap) and the n-gram speculation flags,
and the Engine keyword arguments each set of flags gives.

Owns the spelling of these flags; the meaning of each is its Engine keyword's (docs/interfaces.md).
May import: sgrun.engine.parts.device (defaults), sgrun.engine.parts.ngram_draft (speculation defaults).
"""

from __future__ import annotations

import argparse

from sgrun.engine.parts.device import DEFAULT_MEM_FRACTION
from sgrun.engine.parts.ngram_draft import SpeculativeConfig


def add_device_arguments(p: argparse.ArgumentParser) -> None:
    """The device flags `sgrun serve` and `sgrun generate` share (argparse parser)."""
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--attention-backend", default=None, choices=["cpp", "torch", "triton"],
                   help="default: triton on CUDA; on the CPU cpp (decode reads the KV pages in place), "
                        "torch gathers them (the old path)")
    p.add_argument("--cascade-attention", action=argparse.BooleanOptionalAction, default=True,
                   help="cpp backend: attend a prefix shared by several running requests once per step")
    p.add_argument("--mem-fraction", type=float, default=None,
                   help=f"CUDA: share of device memory for weights + KV pool (default {DEFAULT_MEM_FRACTION})")
    p.add_argument("--disable-cuda-graph", action="store_true", help="CUDA: run decode steps eagerly")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="CPU: torch.compile the decode forward's non-attention blocks and the lm_head "
                        "(default: serve compiles in the background while it already answers eagerly; generate "
                        "compiles only when a warm cache makes it pay for --max-tokens; $SGRUN_COMPILE=0/1 "
                        "overrides the default)")
    p.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=None,
                   help="overlap scheduling (default: on for CUDA, off on the CPU)")
    p.add_argument("--kv-cache-dtype", default="auto",
                   choices=["auto", "float32", "fp32", "float16", "fp16", "bfloat16", "bf16"],
                   help="the KV cache's dtype (default auto: on the CPU float16 or bf16 pages under a float32 "
                        "model, by CPU level, half the bytes a decode step reads per context token; elsewhere "
                        "the model's dtype)")


def device_kwargs(args: argparse.Namespace) -> dict:
    """Engine keyword arguments from add_device_arguments' flags."""
    return dict(device=args.device, attention_backend=args.attention_backend, mem_fraction=args.mem_fraction,
                cuda_graph=False if args.disable_cuda_graph else None, overlap=args.overlap,
                cascade_attention=args.cascade_attention, compile=args.compile, kv_cache_dtype=args.kv_cache_dtype)


def add_speculative_arguments(p: argparse.ArgumentParser) -> None:
    """The speculation flags `sgrun serve` and `sgrun generate` share."""
    d = SpeculativeConfig()
    p.add_argument("--speculative-ngram", action="store_true",
                   help="n-gram speculative decoding (prompt lookup) for requests that do not say "
                        "(speculative_ngram in the request turns it on or off per request); off under --overlap")
    p.add_argument("--speculative-num-draft", type=int, default=d.num_draft,
                   help=f"draft tokens proposed per step (default {d.num_draft})")
    p.add_argument("--speculative-ngram-max", type=int, default=d.ngram_max,
                   help=f"longest suffix n-gram looked up in the context (default {d.ngram_max})")
    p.add_argument("--speculative-ngram-min", type=int, default=d.ngram_min,
                   help=f"shortest suffix n-gram looked up (default {d.ngram_min})")


def speculative_kwargs(args: argparse.Namespace) -> dict:
    """Engine keyword arguments from add_speculative_arguments' flags."""
    return dict(speculative_ngram=args.speculative_ngram, speculative_num_draft=args.speculative_num_draft,
                speculative_ngram_max=args.speculative_ngram_max, speculative_ngram_min=args.speculative_ngram_min)
