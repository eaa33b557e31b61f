"""An approximate radix tree over prompt text, one per replica, kept by the router.

The router never sees a replica's real radix cache (that lives in another process and is keyed by
token ids). It instead remembers the text of the prompts it sent to each replica: the longest
prefix of a new prompt found in a replica's tree predicts how many of its tokens that replica
still holds in cache. The tree is capped in characters and forgets its least recently used
leaves first, mirroring the LRU eviction of the replica's own cache (so an old prefix the
replica has certainly evicted stops attracting traffic).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

_clock = itertools.count()


@dataclass(eq=False)
class _Node:
    text: str                                  # the edge label leading to this node
    parent: "_Node | None"
    children: dict[str, "_Node"] = field(default_factory=dict)   # keyed by the child's first char
    last_used: int = 0


class PrefixTree:
    """Text radix tree with `match` (longest cached prefix, in characters), `insert` and LRU
    eviction down to `max_chars`."""

    def __init__(self, max_chars: int = 4_000_000):
        self.root = _Node("", None)
        self.max_chars = max_chars
        self.size = 0                          # characters stored across all edges

    def match(self, text: str) -> int:
        """Length of the longest prefix of `text` present in the tree; touches the path."""
        node, matched, now = self.root, 0, next(_clock)
        while matched < len(text):
            child = node.children.get(text[matched])
            if child is None:
                break
            n = _common_prefix(child.text, text, matched)
            child.last_used = now
            matched += n
            if n < len(child.text):
                break
            node = child
        return matched

    def insert(self, text: str) -> None:
        node, pos, now = self.root, 0, next(_clock)
        while pos < len(text):
            child = node.children.get(text[pos])
            if child is None:
                leaf = _Node(text[pos:], node, last_used=now)
                node.children[text[pos]] = leaf
                self.size += len(leaf.text)
                break
            n = _common_prefix(child.text, text, pos)
            if n < len(child.text):            # split the edge at the divergence point
                mid = _Node(child.text[:n], node, last_used=now)
                node.children[text[pos]] = mid
                child.text = child.text[n:]
                child.parent = mid
                mid.children[child.text[0]] = child
                child = mid
            child.last_used = now
            node, pos = child, pos + n
        if self.size > self.max_chars:
            self._evict(self.size - self.max_chars)

    def _evict(self, chars: int) -> None:
        """Drop least recently used leaves until `chars` characters are freed."""
        leaves = [n for n in self._nodes() if not n.children and n is not self.root]
        leaves.sort(key=lambda n: n.last_used)
        freed = 0
        while leaves and freed < chars:
            leaf = leaves.pop(0)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.text[0]]
            freed += len(leaf.text)
            self.size -= len(leaf.text)
            if parent is not self.root and not parent.children:
                # The parent became a leaf: it competes by its own recency.
                _insort(leaves, parent)

    def _nodes(self):
        stack = [self.root]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())


def _common_prefix(edge: str, text: str, start: int) -> int:
    n, limit = 0, min(len(edge), len(text) - start)
    while n < limit and edge[n] == text[start + n]:
        n += 1
    return n


def _insort(leaves: list[_Node], node: _Node) -> None:
    i = 0
    while i < len(leaves) and leaves[i].last_used <= node.last_used:
        i += 1
    leaves.insert(i, node)
