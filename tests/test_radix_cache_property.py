"""Property test: random insert / match / lock / unlock / evict sequences on the radix tree keep
the pool and the tree consistent. No model needed."""

from __future__ import annotations

from collections import Counter

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sgrun.engine.state.page_pool import PagePool
from sgrun.engine.state.radix_cache import RadixCache

PS = 4


def check(pool: PagePool, cache: RadixCache, held: list[tuple[list[int], object]]) -> None:
    holders: Counter[int] = Counter()
    locked = 0
    for node in cache.nodes():
        holders.update(node.pages)
        assert len(node.key) == len(node.pages) * PS
        assert node.lock_ref >= 0
        locked += len(node.pages) if node.lock_ref else 0
    assert sum(holders.values()) == cache.num_pages
    assert locked == cache.num_locked_pages
    for pages, _ in held:
        holders.update(pages)
    free = pool.free_set()
    for p in range(pool.num_pages):
        assert pool.ref[p] == holders.get(p, 0)
        assert (p in free) == (holders.get(p, 0) == 0)


ops = st.lists(st.tuples(st.sampled_from(["insert", "match", "release", "evict"]),
                         st.lists(st.integers(0, 3), min_size=1, max_size=24), st.integers(0, 10)),
               min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_random_operations_keep_invariants(sequence):
    pool = PagePool(1, 64, PS, 1, 2, torch.float32)
    cache = RadixCache(pool)
    held: list[tuple[list[int], object]] = []   # (pages a "request" holds, node it locked)
    for op, tokens, k in sequence:
        if op in ("insert", "match"):
            # A request: match, lock, compute the rest in fresh pages, insert, keep holding.
            pages, node = cache.match(tokens)
            assert len(pages) * PS <= len(tokens)
            cache.lock(node)
            n_total = len(tokens) // PS
            need = n_total - len(pages)
            if need > pool.num_free:
                cache.evict(need - pool.num_free)
            if need > pool.num_free:
                cache.unlock(node)
                continue
            pool.incref(pages)
            table = pages + pool.alloc(need)
            if op == "insert" and n_total:
                new = cache.insert(tokens[: n_total * PS], table)
                cache.lock(new)
                cache.unlock(node)
                node = new
                again, _ = cache.match(tokens)
                assert len(again) == n_total  # what was inserted is found again
            held.append((table, node))
        elif op == "release" and held:
            table, node = held.pop(k % len(held))
            cache.unlock(node)
            pool.decref(table)
        elif op == "evict":
            before = pool.num_free
            freed = cache.evict(k)
            assert pool.num_free == before + freed
        check(pool, cache, held)
    for table, node in held:
        cache.unlock(node)
        pool.decref(table)
    cache.flush()
    check(pool, cache, [])
    assert pool.num_free == pool.num_pages and cache.num_pages == 0


def test_match_len_agrees_with_match():
    pool = PagePool(1, 32, PS, 1, 2, torch.float32)
    cache = RadixCache(pool)
    a = list(range(16))
    cache.insert(a, pool.alloc(4))
    assert cache.match_len(a[:10] + [99] * 6) == 8
    pages, _ = cache.match(a[:10] + [99] * 6)
    assert len(pages) * PS == 8
