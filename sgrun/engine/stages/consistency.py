"""Consistency checker for the pool, the radix tree and the sequences (tests and debug mode).

Every page is exactly one of free, cached (held by the tree) or held by requests, and each
page's reference count equals the number of its holders.
"""

from __future__ import annotations

from collections import Counter

from sgrun.engine.state.page_pool import PagePool
from sgrun.engine.state.radix_cache import RadixCache
from sgrun.engine.stages.scheduler import Scheduler


def check_consistency(sched: Scheduler, pool: PagePool, cache: RadixCache | None) -> None:
    holders: Counter[int] = Counter()
    tree_pages = 0
    locked = 0
    if cache is not None:
        for node in cache.nodes():
            holders.update(node.pages)
            tree_pages += len(node.pages)
            assert len(node.key) == len(node.pages) * pool.page_size, "node key not page-aligned"
            if node.lock_ref > 0:
                locked += len(node.pages)
            assert node.lock_ref >= 0
            for child in node.children.values():
                assert child.parent is node
                assert child.lock_ref <= node.lock_ref, "a locked node under a less locked parent"
        assert tree_pages == cache.num_pages, f"tree page count {tree_pages} != {cache.num_pages}"
        assert locked == cache.num_locked_pages, f"locked pages {locked} != {cache.num_locked_pages}"
    for seq in sched.running:
        holders.update(seq.page_table)
        assert seq.num_computed <= len(seq.page_table) * pool.page_size
    for seq in sched.waiting:
        assert not seq.page_table, "a waiting sequence holds pages"
    free = pool.free_set()
    assert len(free) == pool.num_free, "duplicate page in the free list"
    for page in range(pool.num_pages):
        expected = holders.get(page, 0)
        assert pool.ref[page] == expected, f"page {page}: ref {pool.ref[page]} but {expected} holders"
        assert (page in free) == (expected == 0), f"page {page}: free-list membership wrong"
