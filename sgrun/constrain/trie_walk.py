"""Walks of the vocabulary trie for one automaton: the breadth-first numpy walk (all live
(start, node) pairs of a depth per numpy step, the last few finished in Python), and the packing
of token ids into the int32 bitmask. MaskBuilder's fallback and its special-token walks."""

from __future__ import annotations

import numpy as np

from sgrun.constrain.token_table import SubTrie, TokenTable


def ids_of(parts: list) -> np.ndarray:
    """Token ids from a mix of single ids and id arrays."""
    singles = [p for p in parts if not isinstance(p, np.ndarray)]
    arrays = [p for p in parts if isinstance(p, np.ndarray)]
    return np.concatenate([np.array(singles, dtype=np.int64)] + arrays) if arrays else np.array(singles, dtype=np.int64)


def pack(ids: np.ndarray, words: int, out: np.ndarray | None = None) -> np.ndarray:
    """Set bit i of an int32 word array for every id (into `out` when given)."""
    if out is None:
        out = np.zeros(words, dtype=np.int32)
    if len(ids):
        u = out.view(np.uint32)
        np.bitwise_or.at(u, ids >> 5, np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))
    return out


def walk(dfa, trie: TokenTable | SubTrie, node_class: np.ndarray, state: int) -> np.ndarray:
    """Token ids of `trie` whose bytes keep `dfa` alive from `state` (see walk_flags_multi)."""
    return trie.token_ids[walk_flags(dfa, trie, node_class, state)]


PY_TAIL_NODES = 24  # below this many live nodes per depth, finish the walk in plain Python


def walk_flags(dfa, trie: TokenTable | SubTrie, node_class: np.ndarray, state: int) -> np.ndarray:
    """Per token of `trie` (in trie.token_ids order), whether its bytes keep `dfa` alive."""
    return walk_flags_multi(dfa, trie, node_class, [state])[0]


def walk_flags_multi(dfa, trie: TokenTable | SubTrie, node_class: np.ndarray, states: list[int],
                     ends: set[int] | None = None, start: np.ndarray | None = None) -> np.ndarray:
    """[len(states), tokens of `trie`]: whether each token keeps `dfa` alive from each state. A
    breadth-first walk of the trie, all live (start, node) pairs of one depth per numpy step
    (whole subtrees die with their parent); the last few pairs (long tokens such as runs of
    spaces) are finished in Python, where a step costs far less than a round of numpy calls.
    `ends`, when given, collects the states the allowed tokens end in; `start`, when given, the
    depth-1 nodes to walk from (the others' tokens come out False)."""
    ncls = dfa.num_classes
    n = trie.num_nodes
    b = len(states)
    alive = np.zeros(b * n, dtype=np.bool_)
    d1 = trie.depth1 if start is None else start
    first = np.stack([dfa.row(s) for s in states])[:, node_class[d1]].ravel()
    keep = first != 0
    nodes = np.tile(d1, b)[keep]
    src = np.repeat(np.arange(b, dtype=np.int64) * n, len(d1))[keep]
    st = first[keep]
    is_token = trie.__dict__.get("_is_token")
    if ends is not None and is_token is None:
        is_token = np.zeros(n, dtype=np.bool_)
        is_token[trie.token_node] = True
        trie.__dict__["_is_token"] = is_token
    depth = 0
    while len(nodes):
        alive[src + nodes] = True
        if ends is not None:
            ends.update(np.unique(st[is_token[nodes]]).tolist())
        depth += 1
        if len(nodes) <= PY_TAIL_NODES and (start is None or depth > 3):  # (a few roots may hold big subtrees)
            _python_tail(dfa, trie, nodes.tolist(), st.tolist(), src.tolist(), alive, ends, is_token)
            break
        cs = trie.child_start[nodes]
        cnt = trie.child_end[nodes] - cs
        has = cnt > 0
        if not has.all():
            cs, cnt, st, src = cs[has], cnt[has], st[has], src[has]
        total = int(cnt.sum())
        if total == 0:
            break
        offsets = np.cumsum(cnt) - cnt
        children = np.repeat(cs - offsets, cnt) + np.arange(total)
        flat = np.repeat(st, cnt).astype(np.int64) * ncls + node_class[children]
        src = np.repeat(src, cnt)
        nxt = dfa.table.ravel()[flat]
        unknown = nxt < 0
        if unknown.any():
            pairs = np.array(sorted(set(flat[unknown].tolist())), dtype=np.int64)
            dfa.fill_pairs(pairs // ncls, pairs % ncls)
            nxt = dfa.table.ravel()[flat]
        keep = nxt != 0
        nodes = children[keep]
        st = nxt[keep]
        src = src[keep]
    return alive.reshape(b, n)[:, trie.token_node]


def _python_tail(dfa, trie, nodes: list[int], states: list[int], srcs: list[int], alive: np.ndarray,
                 ends: set[int] | None = None, is_token: np.ndarray | None = None) -> None:
    lists = trie.__dict__.get("_py_lists")
    if lists is None:
        lists = (trie.node_byte.tolist(), trie.child_start.tolist(), trie.child_end.tolist())
        trie.__dict__["_py_lists"] = lists
    node_byte, cs, ce = lists
    step = dfa.step
    todo = list(zip(nodes, states, srcs))
    while todo:
        node, q, src = todo.pop()
        alive[src + node] = True
        if ends is not None and is_token[node]:
            ends.add(q)
        for child in range(cs[node], ce[node]):
            t = step(q, node_byte[child])
            if t:
                todo.append((child, t, src))
