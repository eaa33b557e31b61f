"""Cascade attention: a context prefix that several decoding requests share (a radix-cache hit
puts the same physical pages at the start of their page tables) is attended once per step for
all of them, with their queries stacked, and each request's own suffix separately; the two
partial results are merged by their log-sum-exp (softmax over a union of key sets).

`find_shared_prefixes` detects sharing from the page tables each step; attention/cpp_backend.py runs
the kernel's `cascade_prefix` (paged_decode.cpp) on what it finds. The kernel folds a context
chunk by chunk at fixed positions, so a prefix that ends on a chunk boundary (`align_tokens`)
gives every member bitwise the result it would get without the cascade.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

# A shared prefix is attended on its own only when that saves at least this many page reads per
# kv head and layer ((members - 1) x shared pages). Below it the extra kernel call and the merge
# cost more than they save (measured with bench_decode_attention.py at commit 55abf14: cascade 1.42x
# on attention at batch 64 x 1k tokens; docs/cpu_kernels.md).
MIN_SAVED_PAGES = 16


@dataclass
class SharedPrefix:
    """The first `len(pages)` pages of the decode rows `members` are the same physical pages."""
    members: torch.Tensor   # [M] rows of the decode batch (int64)
    pages: torch.Tensor     # [n] the shared page ids (int64)
    tokens: int             # n * page_size: the prefix is whole pages


def find_shared_prefixes(table: torch.Tensor, lens: list[int], page_size: int,
                         min_saved_pages: int = MIN_SAVED_PAGES, align_tokens: int = 1) -> list[SharedPrefix]:
    """Shared prefixes worth a cascade among decode rows with page table `table` ([B, P], rows
    padded past their pages) and context lengths `lens`; every prefix is a multiple of
    `align_tokens` (and of whole pages).

    Rows are grouped by their first page; within a group each row's shared length with the
    group's first row is the run of equal leading pages, capped at the whole pages of its own
    context (so padding never counts, and the prefix is context for every member) and rounded
    down to the alignment. The member set is the one that saves the most reads: the k rows
    sharing most, at the k-th length."""
    out: list[SharedPrefix] = []
    if table.shape[0] < 2:
        return out
    align = math.lcm(page_size, align_tokens) // page_size   # in pages
    # numpy, not torch: these are a few tiny ops per step, and torch's would wake its thread pool.
    tab = table.numpy()
    whole_pages = np.asarray(lens, dtype=np.int64) // page_size
    groups: dict[int, list[int]] = defaultdict(list)
    for i, first in enumerate(tab[:, 0].tolist()):
        groups[first].append(i)
    for idx in groups.values():
        if len(idx) < 2:
            continue
        rows = tab[idx]
        same = np.cumprod(rows == rows[0], axis=1).sum(axis=1)
        cap = whole_pages[idx]
        shared = (np.minimum(same, np.minimum(cap, cap[0])) // align * align).tolist()
        order = sorted(range(len(idx)), key=lambda j: -shared[j])
        best_k, best_saved = 0, 0
        for k in range(2, len(order) + 1):
            saved = (k - 1) * shared[order[k - 1]]
            if saved > best_saved:
                best_k, best_saved = k, saved
        if best_k < 2 or best_saved < min_saved_pages:
            continue
        n = shared[order[best_k - 1]]
        members = torch.tensor(sorted(idx[j] for j in order[:best_k]), dtype=torch.long)
        out.append(SharedPrefix(members, torch.from_numpy(rows[0, :n].copy()), n * page_size))
    return out
