"""Starts the builds of the C++ kernels an engine is about to load, all at once, on threads.

Each kernel is one translation unit, so its build is one single-threaded g++ process: on a fresh
2-core machine matmul, paged_decode and prefill_attention took 26, 32 and 25 s, one after the other
(83 s of a first start that took 87 s, `benchmarks/bench_startup.py`). Started together they share
both cores. The loaders (`CppKernel.load`) are unchanged: one that is asked for while its build runs
waits for it on the kernel's own lock, and a kernel already built (on disk or in this process) only
loads.
"""

from __future__ import annotations

import threading


def start_builds(attention: bool) -> list[threading.Thread]:
    """Build, in the background, the matmul kernel (where the CPU level has tiles) and, with
    `attention` (the cpp attention backend), the decode and prefill attention kernels. Returns the
    threads (daemons: a build is a compiler subprocess, nothing to unwind at exit)."""
    from sgrun.kernels.cpu import matmul, paged_decode, prefill_attention
    kernels = [matmul.KERNEL] if matmul.has_tiles() else []
    if attention:
        kernels += [paged_decode.KERNEL, prefill_attention.KERNEL]
    threads = [threading.Thread(target=k.load, name=f"sgrun-build-{k.name}", daemon=True) for k in kernels]
    for thread in threads:
        thread.start()
    return threads
