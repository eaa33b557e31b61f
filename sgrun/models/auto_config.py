"""What `dtype="auto"` and `quantization="auto"` mean on this CPU, and the line that says what runs.

The choice is a table keyed by the CPU level the kernels run at (kernels/cpu/isa.py: the CPU's
best, or $SGRUN_CPU_ISA), each row the configuration that measured fastest at that level for
single-stream decode and prefill on SmolLM2 Q4_1 with 2 threads. The measurements behind every
row are in docs/benchmarks.md ("auto: the measurements behind the choice"), printed by
`python benchmarks/bench_auto_config.py` (one process per level; lower levels forced). A row's
`measured` says where its numbers come from; an unmeasured row says why it was chosen.

quantization "auto" keeps a quantized file's format (Q4 -> int4, Q8 -> int8) where the level's
int4/int8 kernels beat the dense GEMM, and never quantizes a dense file further than it is
stored (that would change the model's numbers, which is the user's call).

Before this table `auto` meant bf16 only where the CPU has AVX512-BF16/AMX and float32
elsewhere: on an AVX2-only CPU that was the slowest configuration measured there (4.9 tok/s
with int4 against 17.7 for bf16 int4: issue 26).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

log = logging.getLogger("sgrun.engine")


@dataclass(frozen=True)
class AutoChoice:
    dtype: torch.dtype          # activations and dense GEMMs
    keep_file_quantization: bool  # False: a Q4/Q8 file runs dequantized to `dtype`
    measured: str               # where the row's numbers come from (docs/benchmarks.md)


AUTO_TABLE: dict[str, AutoChoice] = {
    # Intel Xeon with AMX (family 6 model 167, native, 6 December 2026): float32 int4 decodes 1.5x
    # bf16 int4 (bench_auto_config, eager, three interleaved rounds: 150.3 vs 100.6 tok/s; compiled, in
    # bench_targets runs an hour apart, 1.1x), and only float32 reached the single-stream target there
    # in any run (same-run ratios to llama.cpp's tg128 0.75-1.03 over four runs, bf16 0.58 in its one). bf16 prefills 1.2x faster (TTFT 2,048:
    # 1.85 against 2.1-2.3 s alternated in fresh processes; oneDNN's AMX GEMM past 48 rows) and
    # served the mixed batches ~1.1x faster; neither choice meets the TTFT-vs-transformers target
    # there (docs/benchmarks.md, 7 December 2026). The row it replaces (bf16, "prefill 5.6x") was
    # measured at load 15 on 2 December, before the float32 int8-activation tiles and C++ decode
    # blocks. Running int4 layers' prefill chunks through the AMX GEMM under a float32 model was
    # tried and gained nothing (2.14-2.32 vs 2.08-2.32 s).
    "amx": AutoChoice(torch.float32, True, "Intel Xeon with AMX, native: float32 int4 decode 1.5x bf16 int4's "
                                           "(150.3 vs 100.6 tok/s), prefill 0.83x (TTFT 2,048; docs/benchmarks.md)"),
    # Zen 4 (AMD EPYC, avx512_bf16 native, 4 December 2026): float32 int4 decodes 1.22-1.28x bf16
    # int4 (three interleaved bench_auto_config runs: 144.5 / 131.9 / 126.6 against 118.3 / 105.8 /
    # 99.2 tok/s), because the float32 path's int8-activation tiles beat the bf16 dot products at one
    # row (gate_up 26 vs 36 us, bench_matmul). bf16 prefilled faster then (TTFT 2,048: 2.39 vs 3.56 s
    # in bench_targets); since 6 December 2026 (the VNNI int4 tile, bf16 products in a float32 pool's long
    # prefill attention, the vectorized row loops) float32 prefills as fast: TTFT 2,048 1.78-1.96 s
    # against bf16's 1.97 s, alternated twice in one window (6 December 2026). Issue 14's bf16 row
    # predates the float32 C++ decode blocks and int8-activation tiles.
    "avx512_bf16": AutoChoice(torch.float32, True, "AMD EPYC Zen 4, native: float32 int4 decode 1.25x bf16 "
                                                   "int4's; prefill as fast (TTFT 2,048 1.78-1.96 vs 1.97 s; "
                                                   "docs/benchmarks.md)"),
    # Without native bf16 GEMMs (no AVX512-BF16/AMX; ARM without the bf16 extension) torch's bf16
    # prefill is emulated: at SGRUN_CPU_ISA=avx2 with torch held to AVX2, 6 prompts of 64-1024 tokens
    # + 32 tokens each took 14.1 s in float32 and more than 400 s in bf16, while bf16 decoded only
    # ~9% faster (51.4 vs 47.1 tok/s, int4 on sgrun's AVX2 int8 tiles either way; timed in
    # fresh processes, load ~1-3, 2 December 2026). Issue 26's 17.7 vs 4.9 tok/s predates those tiles (float32 int4
    # then ran torch's kernel).
    "avx2": AutoChoice(torch.float32, True, "forced avx2 on Sapphire Rapids: float32 int4 prefill >28x bf16's, "
                                            "decode 0.92x (docs/benchmarks.md)"),
    # forced avx512 on Zen 4: bf16 int4 141.2 / float32 134.5 tok/s decode (one run, within its
    # rounds' spread), TTFT 512 0.83 / 0.73 s: float32, as avx2 (no native bf16 GEMM for prefill)
    "avx512": AutoChoice(torch.float32, True, "forced avx512 on Zen 4: float32 int4 prefill 1.14x bf16's, "
                                              "decode within noise (docs/benchmarks.md)"),
    "neon_dotprod": AutoChoice(torch.float32, True, "not measured: as avx2 (no native bf16 GEMM assumed)"),
    "neon": AutoChoice(torch.float32, True, "not measured: as avx2 (no native bf16 GEMM)"),
    # No sgrun kernel at all: int4 would run torch's int4 kernel, ~20 ms a row per weight in
    # float32 (measured, docs/benchmarks.md); the dequantized file through the dense GEMM is not.
    "scalar": AutoChoice(torch.float32, False, "not measured as a whole: torch's int4 kernel measured"),
}


def cpu_level() -> str:
    """The name of the CPU level in force (kernels/cpu/isa.py), e.g. "avx2" or "amx"."""
    from sgrun.kernels.cpu import isa
    return isa.active_level().name


def auto_choice(level: str | None = None) -> AutoChoice:
    return AUTO_TABLE.get(level or cpu_level(), AUTO_TABLE["scalar"])


def auto_dtype(device: torch.device | None) -> torch.dtype:
    """dtype "auto": bf16 on CUDA; on the CPU the table's row for the level in force."""
    if (device.type == "cuda") if device is not None else torch.cuda.is_available():
        return torch.bfloat16
    return auto_choice().dtype


# kv_cache_dtype "auto" under a float32 model, per CPU level: the page dtype whose decode attention
# read fastest there (bench_auto_config.py --configs float32:int4:float32,float32:int4:float16,
# float32:int4:bfloat16 --depth 3000, measured on Zen 4, 6 December 2026, docs/cpu_kernels.md). Either halves the bytes a
# decode step reads per context token (and doubles the context the same memory holds); every CPU
# path reads a narrower pool under float32 queries with float32 products and sums
# (kernels/cpu/paged_chunk_attention.cpp, prefill_attention.cpp), so only the write rounds.
# - avx512_bf16 (Zen 4 native): bf16, whose decode reads the keys with dpbf16ps, 84.2 tok/s after
#   3,000 tokens against 80.3 on float16 and 69.7 on float32 pages; its drift stays inside the
#   target (bench_drift: KL 0.00266 vs llama.cpp's 0.00303, top-1 97.0% vs 96.6%).
# - avx2 (Zen 4 forced): float16 (F16C widening), 89.5 against 79.8 bf16 and 69.0 float32; float16
#   also keeps 3 more bits (exact KL 0.00271 against bf16's 0.00293 and float32's 0.00266).
# - amx: as avx512_bf16 (the same dpbf16ps decode path; not measured). avx512, neon: as avx2 (the
#   same widening paths, F16C / FCVTL; not measured). scalar: float32 pages, not measured: its
#   portable path converts float16 in software.
AUTO_KV_UNDER_FLOAT32: dict[str, torch.dtype] = {
    "amx": torch.bfloat16, "avx512_bf16": torch.bfloat16, "avx512": torch.float16, "avx2": torch.float16,
    "neon_dotprod": torch.float16, "neon": torch.float16, "scalar": torch.float32,
}


def auto_kv_dtype(dtype: torch.dtype, level: str | None = None) -> torch.dtype:
    """kv_cache_dtype "auto" on the CPU for a `dtype` model at `level` (default: the level in force):
    the table above under float32, else the model's dtype. Range: SmolLM2's K and V stay below 23 in
    magnitude (a chat prompt and 1,500 random tokens); a float16 page saturates a value past 65504
    when written, never an infinity."""
    if dtype != torch.float32:
        return dtype
    return AUTO_KV_UNDER_FLOAT32.get(level or cpu_level(), torch.float32)


def auto_quantization(stored: str, device: torch.device) -> str:
    """quantization "auto" for a file stored as `stored` (none, int8, int4)."""
    if device.type != "cpu":
        return "none"   # the int8/int4 linears are CPU kernels; GPUs run the dense dtype
    return stored if auto_choice().keep_file_quantization else "none"


def weight_format(model) -> str:
    """How the layer linears are held and multiplied: "int4 (sgrun avx2 kernel)", "dense bf16 (torch)"."""
    first = model.layers[0]
    lin = first.gate_up if first.gate_up is not None else first.moe.gate_up[0]   # an MoE layer: its experts'
    kind = type(lin).__name__.replace("Linear", "").lower()
    kind = f"dense {str(model.dtype).replace('torch.', '')}" if kind == "dense" else kind
    if not getattr(lin, "cpp", False):
        return f"{kind} (torch kernel)"
    amx = kind == "int4" and model.dtype == torch.float32 and lin.ops.amx_prefill
    return f"{kind} (sgrun {cpu_level()} kernel{'; prefill chunks of 256+ rows on AMX-INT8 tiles' if amx else ''})"
