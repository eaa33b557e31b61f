"""The weights a CPU decode step streams, moved onto transparent huge pages (Linux).

Why: a batch-1 decode step reads every weight once (~96 MB for SmolLM2's int4 layers and int8
lm_head). On 4 KB pages that is ~24,600 pages a step against a second-level TLB of ~2,000
entries, so the stream pays a page walk every 4 KB, and the engine's Python between two steps
finds its own translations and lines evicted (its first torch op after a forward took 64 us
against 3 us warm, Xeon with AMX, 7 December 2026). On 2 MB pages the same weights are ~50 entries.
Measured (docs/cpu_kernels.md, "Weights on huge pages"): the engine's batch-1 step 7.5 -> 6.4 ms
in one process, before and after moving its memory, on that Xeon.

How: every 2 MB-aligned block that the tensors' storage overlaps is marked MADV_HUGEPAGE (so the
kernel keeps it huge, and khugepaged may merge it where the next call is missing), then
MADV_COLLAPSE (Linux 6.1+) moves what is already there onto a huge page now, in place: addresses
and contents stay, so tensors already bound in C++ need nothing. A block shared with other heap
memory is merged whole; that only changes how it is backed. Ubuntu and Debian ship THP as
`madvise`, where nothing is huge without this; where THP is `never`, or the kernel refuses, the
weights stay on 4 KB pages and the report says so. `SGRUN_HUGE_PAGES=0` turns it off.

The KV pool (`zeros_on_huge_pages`, engine/state/page_pool.py) gets a mapping of its own, marked before it
is first written, so its pages fault in huge as they are first used: a decode deep in a context reads as many KV bytes a step as weights
(~70 MB at 3,000 tokens of SmolLM2 in bf16), and collapsing a pool of gigabytes after the fact
would cost seconds at start-up.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import math
import mmap
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch

DISABLE_ENV = "SGRUN_HUGE_PAGES"
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
_THP = "/sys/kernel/mm/transparent_hugepage"


@dataclass
class HugePageReport:
    """What `back_with_huge_pages` did: bytes of weights, bytes now on huge pages, and why not all."""

    weight_bytes: int = 0
    huge_bytes: int = 0
    note: str = ""

    def summary(self) -> str:
        if self.note:
            return self.note
        mib = 1 << 20
        return f"{self.huge_bytes / mib:.0f} of {self.weight_bytes / mib:.0f} MiB of weights on huge pages"


def enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


@functools.lru_cache(maxsize=None)   # read once: the pool asks for every layer's K and V
def thp_mode() -> str | None:
    """The bracketed word of /sys/kernel/mm/transparent_hugepage/enabled, or None where unreadable."""
    try:
        text = Path(_THP, "enabled").read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


@functools.lru_cache(maxsize=None)
def huge_page_bytes() -> int:
    try:
        return int(Path(_THP, "hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 2 << 20


def _ranges(tensors: Iterable[torch.Tensor]) -> list[tuple[int, int]]:
    """(address, bytes) of each distinct CPU storage among `tensors`."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type == "cpu":
            storage = t.untyped_storage()
            if storage.nbytes() > 0:
                seen[storage.data_ptr()] = storage.nbytes()
    return list(seen.items())


@functools.lru_cache(maxsize=None)
def _madvise():
    libc = ctypes.CDLL(None, use_errno=True)
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def _why_not() -> str | None:
    """Why nothing can go onto huge pages here (the report's words), or None where it can."""
    if not sys.platform.startswith("linux"):
        return "off (not Linux)"
    if not enabled():
        return f"off ({DISABLE_ENV}=0)"
    mode = thp_mode()
    if mode in (None, "never"):
        return "off (transparent huge pages " + ("unavailable" if mode is None else "never") + ")"
    if huge_page_bytes() > 32 << 20:   # e.g. 512 MB PMDs on 64 KB-page arm64 kernels: a block would dwarf the model
        return f"off (huge pages are {huge_page_bytes() >> 20} MiB here)"
    return None


def _usable() -> bool:
    return _why_not() is None


def zeros_on_huge_pages(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """torch.zeros(shape, dtype) on the CPU, in an anonymous private mapping of its own, marked
    MADV_HUGEPAGE before anything touches it and starting on a 2 MB boundary: the kernel's zero
    pages, faulted in on first write as huge pages (where the kernel allows; else as 4 KB). Nothing
    is written here, so a pool of gigabytes costs nothing at start-up (writing its zeros at once had
    cost ~1 s: docs/cpu_kernels.md). The tensor holds the mapping; it is unmapped with the tensor."""
    if not _usable():
        return torch.zeros(shape, dtype=dtype)
    numel = math.prod(shape)
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if nbytes == 0:
        return torch.zeros(shape, dtype=dtype)
    size = huge_page_bytes()
    buf = mmap.mmap(-1, nbytes + size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)   # private: shared would be shmem
    buf.madvise(mmap.MADV_HUGEPAGE)   # a refusal leaves 4 KB pages: nothing to do
    offset = -ctypes.addressof(ctypes.c_char.from_buffer(buf)) % size
    return torch.frombuffer(buf, dtype=dtype, count=numel, offset=offset).view(shape)


def back_with_huge_pages(tensors: Iterable[torch.Tensor]) -> HugePageReport:
    """Moves the memory of `tensors` (CPU) onto transparent huge pages, in place (see the module)."""
    report = HugePageReport()
    why_not = _why_not()
    if why_not is not None:
        report.note = why_not
        return report
    size = huge_page_bytes()
    ranges = _ranges(tensors)
    report.weight_bytes = sum(n for _, n in ranges)
    starts = sorted({b for ptr, n in ranges for b in range(ptr - ptr % size, ptr + n, size)})
    madvise = _madvise()
    refused: set[str] = set()
    huge: set[int] = set()
    for start in starts:
        if madvise(start, size, MADV_HUGEPAGE) == 0 and madvise(start, size, MADV_COLLAPSE) == 0:
            huge.add(start)
        else:
            refused.add(errno.errorcode.get(ctypes.get_errno(), "?"))
    # The weight bytes inside the blocks that are huge now.
    report.huge_bytes = sum(min(ptr + n, b + size) - max(ptr, b) for ptr, n in ranges
                            for b in range(ptr - ptr % size, ptr + n, size) if b in huge)
    if refused:
        report.note = (f"{report.summary()}; madvise refused {len(starts) - len(huge)} of {len(starts)} blocks "
                       f"({', '.join(sorted(refused))})")
    return report
