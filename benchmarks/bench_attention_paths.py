"""The attention kernels' vector paths alone, per CPU level, one thread, in one process:

    python benchmarks/bench_attention_paths.py decode avx2,avx512
    python benchmarks/bench_attention_paths.py prefill avx2,avx512_bf16

decode: `paged_decode` at SmolLM2's shape (9/3 heads x 64, pages of 16, shuffled), each level's
build against a second build of the same sources with -DSG_PORTABLE_CHUNK (the portable
GCC-vector chunk path), bf16 and float32 pools, 1 row x 2,048 tokens and 16 rows x 512.
prefill: `prefill_attention` on one whole prompt (256, 1,024 tokens) against SDPA as the backend
runs it (the context gathered out of the pages, causal, GQA). To see what SDPA does on an
AVX2-only CPU, run with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2.
Medians of repeated calls, the two variants interleaved twice and the better median kept; the
load average is printed with every line (docs/cpu_kernels.md has the figures).
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from sgrun.kernels.cpu import paged_decode as pd, prefill_attention as pa
from sgrun.kernels.cpu.build import CppKernel

torch.set_num_threads(1)


def load():
    return open("/proc/loadavg").read().split()[:3]


def med(fn, n):
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


what = sys.argv[1]
levels = sys.argv[2].split(",")
if what == "decode":
    PORTABLE = CppKernel("paged_decode_portable", pd.KERNEL.sources, pd.KERNEL.functions, what="portable decode",
                         fallback="-", fail_env="NONE_X", flags=("-ffp-contract=off", "-DSG_PORTABLE_CHUNK"))
    H, KV, D, ps = 9, 3, 64, 16
    for level in levels:
        ops = {"simd": pd.load_kernel(level), "portable": PORTABLE.load(level)}
        print(level, {k: v.decode_path("bfloat16", D) for k, v in ops.items()})
        for dtype in (torch.bfloat16, torch.float32):
            for R, ctx in ((1, 2048), (16, 512)):
                g = torch.Generator().manual_seed(0)
                pages = R * ctx // ps + 1
                k = torch.randn(KV, pages, ps, D, generator=g).to(dtype); v = torch.randn(KV, pages, ps, D, generator=g).to(dtype)
                table = torch.randperm(pages, generator=g)[: R * ctx // ps].view(R, -1).contiguous()
                lens = torch.full((R,), ctx); starts = torch.zeros(R, dtype=torch.long)
                q = torch.randn(R, H, D, generator=g).to(dtype)
                out = torch.empty(R, KV, H // KV, D); lse = torch.empty(R, KV, H // KV)
                res = {}
                for name in ("portable", "simd", "portable", "simd"):   # interleaved, best of the two medians
                    op = ops[name]
                    t = med(lambda: op.paged_decode(q, k, v, table, lens, starts, D ** -0.5, out, lse), 60)
                    res[name] = min(res.get(name, 1e9), t)
                print(f"  {level:7s} {str(dtype)[6:]:9s} rows {R:2d} x ctx {ctx}: portable {res['portable']:.3f} ms, "
                      f"avx2 {res['simd']:.3f} ms, speedup {res['portable'] / res['simd']:.2f}x  load {load()}")
else:
    H, KV, D, ps = 9, 3, 64, 16
    for level in levels:
        op = pa.load_kernel(level)
        for dtype in (torch.bfloat16, torch.float32):
            print(level, str(dtype), "path", op.fast_path(str(dtype)[6:], D))
            for length in (256, 1024):
                pages = -(-length // ps)
                g = torch.Generator().manual_seed(0)
                kc = torch.randn(KV, pages, ps, D, generator=g).to(dtype); vc = torch.randn(KV, pages, ps, D, generator=g).to(dtype)
                q = torch.randn(length, H, D, generator=g).to(dtype); out = torch.empty_like(q)
                meta = [torch.tensor([x]) for x in (0, length, length)]; table = torch.arange(pages)[None]
                def sdpa():   # the backend's SDPA path: gather the context out of the pages, causal
                    ks, vs = (c[:, table[0]].reshape(KV, -1, D)[:, :length][None] for c in (kc, vc))
                    return F.scaled_dot_product_attention(q.transpose(0, 1)[None], ks, vs, is_causal=True, enable_gqa=True)
                kern = lambda: op.prefill_attention(q, kc, vc, table, *meta, D ** -0.5, out, False, pa.bf16_from(),
                                                    level == "amx" and op.amx_ready(), 0)
                n = 20 if length <= 256 else 6
                res = {}
                for name, fn in (("sdpa", sdpa), ("kernel", kern), ("sdpa", sdpa), ("kernel", kern)):
                    try:
                        res[name] = min(res.get(name, 1e9), med(fn, n))
                    except RuntimeError as e:
                        res[name] = float("nan"); print("   ", name, "failed:", str(e)[:80])
                flop = H * length * (length + 1) / 2 * D * 4
                print(f"  {level:11s} {str(dtype)[6:]:9s} {length:5d} tokens: SDPA {res['sdpa']:.2f} ms, kernel {res['kernel']:.2f} ms "
                      f"({flop / res['kernel'] / 1e6:.0f} GFLOP/s), {res['sdpa'] / res['kernel']:.2f}x  load {load()}")
