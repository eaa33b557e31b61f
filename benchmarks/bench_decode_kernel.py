"""The paged decode attention kernel alone (paged_decode.cpp), at the shapes of a decode step,
against the read-bandwidth roofline, and optionally against the kernel of another git revision,
side by side in one run.

    python benchmarks/bench_decode_kernel.py [--batch 64] [--context 1024] [--threads 2]
                                             [--layers 30] [--baseline REV] [--repeats 5]

It fills a pool shaped like SmolLM2-135M's (3 kv heads, 9 query heads, head dim 64, pages of 16
tokens, bf16) with random K/V, gives every row its own pages (so nothing is read twice, as in a
batch of unrelated requests), and times one call per layer over `--layers` separate layer
caches (1.5 GB at 64 x 1k, far beyond any cache), as a decode step does. Two page layouts:
each row's pages in order (a fresh engine's prefill allocates them so) and shuffled over the
whole pool (a long-running server's fragmented pool: no hardware prefetcher helps). The roofline is
the K/V bytes over the read bandwidth measured here with the same thread count. With
`--baseline REV` the kernel source of that revision (e.g. `main`) is built too and the two are
timed alternately, so load from the machine's other tenants hits both alike.
Also timed: the decode preparation a step runs on the host with its cascade detection (CppPagedAttention's
`_prepare_decodes`) at this batch, with unrelated rows and with rows sharing a prefix.
"""

from __future__ import annotations

import os

# Worker threads sleep between parallel regions instead of spinning: on a machine shared with
# other processes, spinning threads steal the cores the next region needs (as bench_engine.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from bench_options import add_threads, load_avg, read_bandwidth_gbs, uptime, machine_line  # noqa: E402


def revision_sources(rev: str) -> list[str]:
    """The decode kernel's source files at `rev`, in build order: its paged_decode.py's SOURCES
    (the kernel grew from 3 files to 6), or the first three for revisions before that list."""
    import re
    got = subprocess.run(["git", "show", f"{rev}:sgrun/kernels/cpu/paged_decode.py"], capture_output=True, text=True)
    listed = re.search(r"^SOURCES = \((.*?)\)", got.stdout, re.S | re.M) if got.returncode == 0 else None
    if listed:
        return re.findall(r'"([\w.]+\.cpp)"', listed.group(1))
    return ["paged_rows.cpp", "paged_chunk_attention.cpp", "paged_decode.cpp"]


def build_revision(rev: str):
    """The decode kernel of git revision `rev`, built under its own name (from whichever of its
    source files that revision has, in build order)."""
    from sgrun.kernels.cpu.build import CppKernel
    folder = Path(tempfile.mkdtemp(prefix="sgrun_kernel_rev_"))
    names = []
    for name in revision_sources(rev):
        got = subprocess.run(["git", "show", f"{rev}:sgrun/kernels/cpu/{name}"], capture_output=True, text=True)
        if got.returncode != 0:   # revisions before the one kernel home
            got = subprocess.run(["git", "show", f"{rev}:sgrun/engine/{name}"], capture_output=True, text=True)
        if got.returncode == 0:
            (folder / name).write_text(got.stdout)
            names.append(name)
    new_api = "paged_chunk_attention.cpp" in names
    kernel = CppKernel(f"paged_decode_rev_{rev.replace('/', '_')}", tuple(folder / n for n in names),
                       ["paged_decode", "cascade_prefix"] + (["chunk_tokens"] if new_api else []),
                       what=f"the kernel of {rev}", fallback="not timed", fail_env="SGRUN_NO_SUCH_SWITCH",
                       flags=("-ffp-contract=off",) if new_api else ())
    op = kernel.load()
    assert op is not None, f"the kernel of {rev} did not build"
    return op


def decode_call(op, q, table, lens, d):
    """One layer's call, whichever API the kernel has: the older one returns (out, lse), the
    current one writes them and takes the tokens a cascade already covered (none here)."""
    if not hasattr(op, "chunk_tokens"):
        return lambda kc, vc: op.paged_decode(q, kc, vc, table, lens, d ** -0.5)
    r, h = q.shape[0], q.shape[1]
    out, lse, starts = torch.empty(r, h * d), torch.empty(r, h), torch.zeros_like(lens)

    def call(kc, vc):
        op.paged_decode(q, kc, vc, table, lens, starts, d ** -0.5, out, lse)
        return out.view(r, kc.shape[0], -1, d), lse.view(r, kc.shape[0], -1)   # reused by the next call
    return call


def time_cascade_detection(batch: int, context: int, page_size: int = 16) -> dict[str, float]:
    """ms per call of CppPagedAttention._prepare_decodes (page table, lengths and cascade detection)
    for `batch` decodes: unrelated rows, and rows sharing 3/4 of their pages."""
    from sgrun.engine.parts.attention.backend import Segment
    from sgrun.engine.parts.attention.cpp_backend import CppPagedAttention
    from sgrun.engine.state.page_pool import PagePool
    from sgrun.kernels.cpu.paged_decode import load_kernel
    pages_per_row = -(-(context + 1) // page_size)
    pool = PagePool(1, batch * pages_per_row + 8, page_size, 1, 16, torch.bfloat16)
    attn = CppPagedAttention(pool, 3, 1, 16, load_kernel())
    out = {}
    for label, shared in (("unrelated rows", 0), ("3/4 of the pages shared", 3 * pages_per_row // 4)):
        nxt = iter(range(shared + 1, pool.k[0].shape[1]))
        segs = []
        for i in range(batch):
            own = [next(nxt) for _ in range(pages_per_row - shared)]
            segs.append(Segment(q_start=i, q_len=1, ctx_len=context + 1,
                                pages=torch.tensor(list(range(1, shared + 1)) + own, dtype=torch.long)))
        times = []
        for _ in range(30):
            t = time.perf_counter()
            attn._prepare_decodes(segs)
            times.append(time.perf_counter() - t)
        out[label] = statistics.median(times) * 1e3
        out[label + " prefixes"] = len(attn.prefixes)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--context", type=int, default=1024)
    add_threads(ap)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5, help="timed passes over all layers per kernel")
    ap.add_argument("--baseline", default=None, help="a git revision whose kernel is timed alongside")
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    torch.set_num_threads(args.threads)
    from sgrun.kernels.cpu.paged_decode import load_kernel
    kernels = {"this tree": load_kernel()}
    assert kernels["this tree"] is not None, "the kernel did not build"
    if args.baseline:
        kernels[args.baseline] = build_revision(args.baseline)
    kv, g, d, ps = 3, 3, 64, 16
    pages_per_row = -(-args.context // ps)
    num_pages = args.batch * pages_per_row
    gen = torch.Generator().manual_seed(0)
    caches = [(torch.randn(kv, num_pages, ps, d, generator=gen).to(torch.bfloat16),
               torch.randn(kv, num_pages, ps, d, generator=gen).to(torch.bfloat16)) for _ in range(args.layers)]
    tables = {"in order": torch.arange(num_pages).view(args.batch, pages_per_row),
              "shuffled": torch.randperm(num_pages, generator=gen).view(args.batch, pages_per_row).contiguous()}
    lens = torch.full((args.batch,), args.context, dtype=torch.long)
    qkv = torch.randn(args.batch, kv * g + 2 * kv, d, generator=gen).to(torch.bfloat16)
    q = qkv[:, : kv * g]   # a strided view, as the model passes it
    kv_bytes = 2 * args.batch * args.context * kv * d * 2 * args.layers
    bw = read_bandwidth_gbs()
    print(f"uptime: {uptime()}")
    print(f"{args.threads} threads, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, read bandwidth {bw:.1f} GB/s; batch {args.batch} x {args.context} tokens, "
          f"{args.layers} layers: {kv_bytes / 1e9:.2f} GB of bf16 K/V per step -> roofline "
          f"{kv_bytes / bw / 1e6:.1f} ms/step = {kv_bytes / bw / 1e6 / args.layers:.2f} ms/layer")
    per_layer_bytes = kv_bytes / args.layers
    for layout, table in tables.items():
        calls = {name: decode_call(op, q, table, lens, d) for name, op in kernels.items()}
        for call in calls.values():   # warm-up (first touch, thread pool)
            for kc, vc in caches[:2]:
                call(kc, vc)
        times: dict[str, list[float]] = {name: [] for name in kernels}
        for _ in range(args.repeats):
            for name, call in calls.items():
                t = time.perf_counter()
                for kc, vc in caches:
                    call(kc, vc)
                times[name].append((time.perf_counter() - t) / args.layers)
        if len(kernels) > 1:
            ref = [x.clone() for x in calls[args.baseline](*caches[0])]
            new = calls["this tree"](*caches[0])
            print(f"pages {layout}: max |this tree - {args.baseline}|: out {(ref[0] - new[0]).abs().max().item():.2e}, "
                  f"lse {(ref[1] - new[1]).abs().max().item():.2e}")
        for name, ts in times.items():
            ms = statistics.median(ts) * 1e3
            print(f"  pages {layout:<9} {name:<12} {ms:6.2f} ms/layer ({ms * args.layers:6.1f} ms/step), "
                  f"{per_layer_bytes / ms / 1e6:5.1f} GB/s = {100 * per_layer_bytes / ms / 1e6 / bw:4.0f}% of the "
                  f"measured bandwidth   (median of {args.repeats}, best {min(ts) * 1e3:.2f}; load {load_avg()})")
    det = time_cascade_detection(args.batch, args.context)
    for label in ("unrelated rows", "3/4 of the pages shared"):
        print(f"  decode prep with cascade detection ({label}, {int(det[label + ' prefixes'])} prefixes): "
              f"{det[label]:.2f} ms per step   (load {load_avg()})")


if __name__ == "__main__":
    main()
