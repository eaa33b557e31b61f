"""Radix tree over token ids whose nodes own KV pages (page-aligned edges).

The tree holds one reference on each of its pages (see PagePool). Running requests lock the
path they use, so `evict` only ever frees pages no request depends on, leaves first in LRU order.
"""

from __future__ import annotations

import heapq
import itertools

from sgrun.engine.state.page_pool import PagePool


class RadixNode:
    __slots__ = ("key", "pages", "children", "parent", "lock_ref", "last_access")

    def __init__(self, key: list[int], pages: list[int], parent: "RadixNode | None"):
        self.key = key
        self.pages = pages
        self.children: dict[tuple[int, ...], RadixNode] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access = 0


class RadixCache:
    def __init__(self, pool: PagePool, capacity_pages: int | None = None):
        self.pool = pool
        self.ps = pool.page_size
        self.capacity_pages = capacity_pages
        self.root = RadixNode([], [], None)
        self.root.lock_ref = 1  # the root is never evicted
        self.num_pages = 0          # pages the tree holds
        self.num_locked_pages = 0   # of those, pages on some running request's path
        self._clock = itertools.count(1)

    # --- lookup ---------------------------------------------------------------------------
    def _common_pages(self, key: list[int], ids: list[int], start: int) -> int:
        """Number of leading whole pages of `key` equal to ids[start:]."""
        ps, n = self.ps, 0
        while n * ps < len(key) and key[n * ps:(n + 1) * ps] == ids[start + n * ps:start + (n + 1) * ps]:
            n += 1
        return n

    def match(self, ids: list[int], limit: int | None = None) -> tuple[list[int], RadixNode]:
        """Longest cached page-aligned prefix of ids[:limit]: (its pages, the node where it ends)."""
        ids = ids if limit is None else ids[:limit]
        node, i, pages = self.root, 0, []
        now = next(self._clock)
        while len(ids) - i >= self.ps:
            child = node.children.get(tuple(ids[i:i + self.ps]))
            if child is None:
                break
            n = self._common_pages(child.key, ids, i)
            if n * self.ps < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            pages.extend(child.pages)
            node, i = child, i + len(child.key)
        return pages, node

    def match_len(self, ids: list[int]) -> int:
        """Cached prefix length without touching LRU order or splitting nodes (for scheduling)."""
        node, i = self.root, 0
        while len(ids) - i >= self.ps:
            child = node.children.get(tuple(ids[i:i + self.ps]))
            if child is None:
                break
            n = self._common_pages(child.key, ids, i)
            i += n * self.ps
            if n * self.ps < len(child.key):
                break
            node = child
        return i

    def _split(self, node: RadixNode, n_pages: int) -> RadixNode:
        """Split `node` after n_pages pages; returns the new upper half (which keeps the parent link)."""
        cut = n_pages * self.ps
        upper = RadixNode(node.key[:cut], node.pages[:n_pages], node.parent)
        upper.lock_ref = node.lock_ref
        upper.last_access = node.last_access
        upper.children[tuple(node.key[cut:cut + self.ps])] = node
        node.parent.children[tuple(node.key[:self.ps])] = upper
        node.key, node.pages, node.parent = node.key[cut:], node.pages[n_pages:], upper
        return upper

    # --- insertion ------------------------------------------------------------------------
    def insert(self, ids: list[int], pages: list[int]) -> RadixNode:
        """Cache ids (a multiple of the page size long) held in `pages`; parts already cached keep
        the tree's pages. Returns the node where ids end."""
        assert len(ids) == len(pages) * self.ps
        node, i = self.root, 0
        now = next(self._clock)
        while i < len(ids):
            child = node.children.get(tuple(ids[i:i + self.ps]))
            if child is None:
                new_pages = pages[i // self.ps:]
                child = RadixNode(ids[i:], list(new_pages), node)
                child.last_access = now
                node.children[tuple(ids[i:i + self.ps])] = child
                self.pool.incref(new_pages)
                self.num_pages += len(new_pages)
                return child
            n = self._common_pages(child.key, ids, i)
            if n * self.ps < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            node, i = child, i + len(child.key)
        return node

    # --- locking --------------------------------------------------------------------------
    def lock(self, node: RadixNode) -> None:
        while node is not self.root:
            if node.lock_ref == 0:
                self.num_locked_pages += len(node.pages)
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: RadixNode) -> None:
        while node is not self.root:
            assert node.lock_ref > 0
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.num_locked_pages -= len(node.pages)
            node = node.parent

    # --- eviction -------------------------------------------------------------------------
    @property
    def num_evictable_pages(self) -> int:
        return self.num_pages - self.num_locked_pages

    def evict(self, num_pages: int) -> int:
        """Free at least num_pages pages from unlocked leaves, least recently used first."""
        heap = [(n.last_access, id(n), n) for n in self._leaves() if n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < num_pages:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            del parent.children[tuple(leaf.key[:self.ps])]
            self.pool.decref(leaf.pages)
            self.num_pages -= len(leaf.pages)
            freed += len(leaf.pages)
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        return freed

    def enforce_capacity(self) -> None:
        if self.capacity_pages is not None and self.num_pages > self.capacity_pages:
            self.evict(self.num_pages - self.capacity_pages)

    def flush(self) -> int:
        return self.evict(self.num_pages)

    def _leaves(self):
        stack = [self.root]
        while stack:
            n = stack.pop()
            if n.children:
                stack.extend(n.children.values())
            elif n is not self.root:
                yield n

    def nodes(self):
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())
