"""The paged KV pool: per layer one K and one V tensor of fixed-size pages
([kv_heads, num_pages, page_size, head_dim]), reference-counted.

A page's reference count is the number of its holders: each request whose page table lists it,
plus the radix cache when the page is in the tree. A page with no holder is free.
"""

from __future__ import annotations

import torch

from sgrun.models.huge_pages import zeros_on_huge_pages


class PoolExhausted(Exception):
    """Not enough free pages; the scheduler reacts by evicting cache or preempting."""


class PagePool:
    def __init__(self, num_layers: int, num_pages: int, page_size: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: str | torch.device = "cpu"):
        self.num_pages = num_pages
        self.page_size = page_size
        # Heads outermost, so one index_select gathers a batch's pages for every head at once and
        # each head's context is a contiguous [tokens, head_dim] block (see attention/torch_backend.py).
        # One page past num_pages is scratch, outside the bookkeeping: CUDA-graph padding rows
        # attend to it and write their K/V there, so they never touch a request's pages.
        shape = (kv_heads, num_pages + 1, page_size, head_dim)
        self.scratch_page = num_pages
        if torch.device(device).type == "cpu":   # pages the kernel can back with 2 MB ones (huge_pages.py)
            self.k = [zeros_on_huge_pages(shape, dtype) for _ in range(num_layers)]
            self.v = [zeros_on_huge_pages(shape, dtype) for _ in range(num_layers)]
        else:
            self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
            self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.ref = [0] * num_pages
        self._free: list[int] = list(range(num_pages - 1, -1, -1))

    @staticmethod
    def bytes_per_page(num_layers: int, page_size: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * page_size * kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size()

    @property
    def num_free(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        if n > len(self._free):
            raise PoolExhausted(f"need {n} pages, {len(self._free)} free")
        pages = [self._free.pop() for _ in range(n)]
        for p in pages:
            assert self.ref[p] == 0
            self.ref[p] = 1
        return pages

    def incref(self, pages: list[int]) -> None:
        for p in pages:
            assert self.ref[p] > 0, f"incref of free page {p}"
            self.ref[p] += 1

    def decref(self, pages: list[int]) -> None:
        for p in pages:
            assert self.ref[p] > 0, f"decref of free page {p}"
            self.ref[p] -= 1
            if self.ref[p] == 0:
                self._free.append(p)

    def free_set(self) -> set[int]:
        return set(self._free)
