"""A read-only copy of the radix tree for the web page's engine view.

`take_snapshot` walks live engine structures, so it must run on the engine loop thread
(`engine.run_on_loop(lambda: take_snapshot(engine.cache))`), between steps, where nothing mutates
the tree. It copies plain numbers and a few leading token ids per node and nothing else; the
text preview is decoded afterwards, off the loop (`describe`), so the engine is held up only for
the walk itself. Bounded: at most `max_nodes` nodes, breadth-first (the top of the tree is what
a person looks at), with `truncated` telling how many were left out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

PREVIEW_TOKENS = 6


@dataclass
class NodeSnapshot:
    id: int
    tokens: int                     # tokens on this node's edge
    pages: int
    lock_ref: int                   # running requests whose path goes through this node
    last_access: int
    head: list[int]                 # the edge's first PREVIEW_TOKENS token ids
    children: list["NodeSnapshot"] = field(default_factory=list)


@dataclass
class TreeSnapshot:
    root: NodeSnapshot
    nodes: int                      # nodes copied (the root excluded)
    truncated: int                  # nodes left out past max_nodes
    cached_tokens: int              # tokens held by the whole tree


def take_snapshot(cache: Any, max_nodes: int = 300) -> TreeSnapshot | None:
    """Call on the engine loop thread. None when the engine runs without a prefix cache."""
    if cache is None:
        return None
    ids = iter(range(1 << 62))
    root = NodeSnapshot(next(ids), 0, 0, cache.root.lock_ref, cache.root.last_access, [])
    queue = deque([(cache.root, root)])
    copied = truncated = 0
    while queue:
        live, snap = queue.popleft()
        for child in live.children.values():
            if copied >= max_nodes:
                truncated += 1
                continue
            c = NodeSnapshot(next(ids), len(child.key), len(child.pages), child.lock_ref, child.last_access,
                             list(child.key[:PREVIEW_TOKENS]))
            snap.children.append(c)
            queue.append((child, c))
            copied += 1
    return TreeSnapshot(root, copied, truncated, cache.num_pages * cache.ps)


def describe(snapshot: TreeSnapshot | None, tokenizer: Any) -> dict[str, Any] | None:
    """JSON-ready dict with a decoded text preview per node (runs off the engine loop)."""
    if snapshot is None:
        return None

    def node(n: NodeSnapshot) -> dict[str, Any]:
        return {"id": n.id, "tokens": n.tokens, "pages": n.pages, "lock_ref": n.lock_ref, "locked": n.lock_ref > 0,
                "last_access": n.last_access, "preview": tokenizer.decode(n.head) if n.head else "",
                "children": [node(c) for c in n.children]}

    return {"root": node(snapshot.root), "nodes": snapshot.nodes, "truncated": snapshot.truncated,
            "cached_tokens": snapshot.cached_tokens}
