"""Token masks for one automaton state, by the cheapest exact method that applies:

1. sparse: few bytes are allowed (keys, literals, numbers, punctuation) -> a pure-Python walk of
   the vocabulary trie that only follows allowed bytes (tens of nodes, no numpy per depth);
2. text chain: every text byte (printable ASCII but `"` and `\\`) leads to the same next state,
   for as long as a text token can be (string bodies, free text) -> text tokens are decided by
   length alone (one precomputed bitmask), and only the ~1.2k other tokens are walked;
3. otherwise the breadth-first numpy walk over the whole trie.

All three give the same set; the automaton is anything with LazyDFA's interface (row, step,
class_of, class_size, num_classes, table, fill_pairs): LazyDFA or GrammarAutomaton.
"""

from __future__ import annotations

import numpy as np

from sgrun.constrain.token_table import TokenTable
from sgrun.constrain.vocab_index import TEXT_BYTES, SubTrie, vocab_index

SPARSE_MAX_LIVE_BYTES = 24   # allowed bytes at the state itself for trying the sparse walk
SPARSE_BUDGET = 3000         # trie edges the sparse walk may look at before giving up
_NOT_UNIFORM = -2
_DEAD = -1  # chain step into the dead state: the state before it allows 0 text bytes


class MaskBuilder:
    def __init__(self, dfa, table: TokenTable):
        self.dfa = dfa
        self.table = table
        self.vi = vocab_index(table)
        class_of = dfa.class_of
        self.class_of = class_of.tolist()
        self.class_size = np.array(dfa.class_size, dtype=np.int64)
        self.class_bytes: list[list[int]] = [[] for _ in range(dfa.num_classes)]
        for b in range(256):
            self.class_bytes[self.class_of[b]].append(b)
        self.text_classes = np.array(sorted({self.class_of[b] for b in TEXT_BYTES}), dtype=np.int64)
        self._rows: dict[int, list[int]] = {}
        self._live: dict[int, list[tuple[int, int]]] = {}
        self._chain: dict[int, int] = {}
        self._node_class = class_of[table.node_byte].astype(np.int64)
        self._special_class = class_of[self.vi.special.node_byte].astype(np.int64)
        self.stats = {"sparse": 0, "chain": 0, "walk": 0}

    # --- entry point ------------------------------------------------------------------------
    def packed(self, state: int) -> np.ndarray:
        """Packed int32 bitmask of the non-special tokens allowed from `state` (no EOS)."""
        row = self.dfa.row(state)
        live_bytes = int(self.class_size[row != 0].sum())
        if live_bytes <= SPARSE_MAX_LIVE_BYTES:
            got = self._sparse(state)
            if got is not None:
                self.stats["sparse"] += 1
                return pack(np.array(got, dtype=np.int64), self.table.words)
        r = self.chain_length(state)
        if r >= 0:
            self.stats["chain"] += 1
            out = self.vi.text_upto[r].copy()
            self.vi.special_bits.set(walk_flags(self.dfa, self.vi.special, self._special_class, state), out)
            return out
        self.stats["walk"] += 1
        return pack(walk(self.dfa, self.table, self._node_class, state), self.table.words)

    # --- 1. sparse -------------------------------------------------------------------------
    def _row(self, q: int) -> list[int]:
        r = self._rows.get(q)
        if r is None:
            r = self.dfa.row(q).tolist()
            self._rows[q] = r
        return r

    def _live_bytes(self, q: int) -> list[tuple[int, int]]:
        got = self._live.get(q)
        if got is None:
            row = self._row(q)
            got = [(b, t) for c, t in enumerate(row) if t for b in self.class_bytes[c]]
            self._live[q] = got
        return got

    def _sparse(self, state: int) -> list[int] | None:
        vi = self.vi
        kids, children, node_token, root_kids = vi.kids, vi.children, vi.node_token, vi.root_kids
        class_of, step = self.class_of, self.dfa.step
        out: list[int] = []
        work = 0
        stack: list[tuple[int, int]] = []
        for b, t in self._live_bytes(state):
            child = root_kids[b]
            if child >= 0:
                stack.append((child, t))
        while stack:
            node, q = stack.pop()
            tok = node_token[node]
            if tok >= 0:
                out.append(tok)
            ch = children[node]
            if not ch:
                continue
            row = self._rows.get(q)
            if row is None and len(ch) <= 4:
                # a few children: step just those bytes instead of filling q's whole row
                for b, child in ch:
                    t = step(q, b)
                    if t:
                        stack.append((child, t))
                work += len(ch)
            else:
                live = self._live_bytes(q)
                if len(ch) <= len(live):
                    row = self._rows[q]
                    for b, child in ch:
                        t = row[class_of[b]]
                        if t:
                            stack.append((child, t))
                    work += len(ch)
                else:
                    base = node << 8
                    for b, t in live:
                        child = kids.get(base | b)
                        if child is not None:
                            stack.append((child, t))
                    work += len(live)
            if work > SPARSE_BUDGET:
                return None
        return out

    # --- 2. text chain ---------------------------------------------------------------------
    def chain_length(self, state: int) -> int:
        """How many text bytes in a row keep the automaton alive from `state` (capped at the
        longest text token), provided every text byte leads to the same state at each of those
        steps; -1 if some step tells text bytes apart (then length alone does not decide)."""
        cap = self.vi.max_text_len
        memo = self._chain
        if state in memo:
            return memo[state]
        path: list[int] = []
        on_path: set[int] = set()
        q = state
        truncated = False
        while True:
            if q in memo:
                nxt_val = memo[q]
                break
            if q in on_path:  # a cycle of live states: any run of text stays alive
                nxt_val = cap
                break
            if len(path) >= 2 * cap:
                nxt_val, truncated = cap, True
                break
            nxt = self.dfa.uniform_target(q, self.text_classes)
            if nxt is None:
                memo[q] = nxt_val = _NOT_UNIFORM
                break
            path.append(q)
            on_path.add(q)
            if nxt == 0:
                nxt_val = _DEAD
                break
            q = nxt
        for k, p in enumerate(reversed(path)):
            if truncated and len(path) - 1 - k >= cap:  # only states checked for >= cap steps
                continue
            if truncated:
                memo[p] = cap
            else:
                memo[p] = _NOT_UNIFORM if nxt_val == _NOT_UNIFORM else min(cap, nxt_val + k + 1)
        return memo[state]

    def stats_line(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.stats.items())


def pack(ids: np.ndarray, words: int, out: np.ndarray | None = None) -> np.ndarray:
    """Set bit i of an int32 word array for every id (into `out` when given)."""
    if out is None:
        out = np.zeros(words, dtype=np.int32)
    if len(ids):
        u = out.view(np.uint32)
        np.bitwise_or.at(u, ids >> 5, np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))
    return out


PY_TAIL_NODES = 24  # below this many live nodes per depth, finish the walk in plain Python


def walk(dfa, trie: TokenTable | SubTrie, node_class: np.ndarray, state: int) -> np.ndarray:
    """Token ids of `trie` whose bytes keep `dfa` alive from `state` (see walk_flags)."""
    return trie.token_ids[walk_flags(dfa, trie, node_class, state)]


def walk_flags(dfa, trie: TokenTable | SubTrie, node_class: np.ndarray, state: int) -> np.ndarray:
    """Per token of `trie` (in trie.token_ids order), whether its bytes keep `dfa` alive from `state`: a breadth-first walk of the
    trie, all live nodes of one depth per numpy step (whole subtrees die with their parent);
    the last few nodes (long tokens such as runs of spaces) are finished in Python, where one
    step costs far less than a round of numpy calls."""
    ncls = dfa.num_classes
    alive_nodes = np.zeros(trie.num_nodes, dtype=np.bool_)
    row = dfa.row(state)
    st = row[node_class[trie.depth1]]
    keep = st != 0
    nodes = trie.depth1[keep]
    st = st[keep]
    while len(nodes):
        alive_nodes[nodes] = True
        if len(nodes) <= PY_TAIL_NODES:
            _python_tail(dfa, trie, nodes.tolist(), st.tolist(), alive_nodes)
            break
        cs = trie.child_start[nodes]
        cnt = trie.child_end[nodes] - cs
        has = cnt > 0
        if not has.all():
            cs, cnt, st = cs[has], cnt[has], st[has]
        total = int(cnt.sum())
        if total == 0:
            break
        offsets = np.cumsum(cnt) - cnt
        children = np.repeat(cs - offsets, cnt) + np.arange(total)
        src = np.repeat(st, cnt)
        flat = src.astype(np.int64) * ncls + node_class[children]
        nxt = dfa.table.ravel()[flat]
        unknown = nxt < 0
        if unknown.any():
            pairs = np.array(sorted(set(flat[unknown].tolist())), dtype=np.int64)
            dfa.fill_pairs(pairs // ncls, pairs % ncls)
            nxt = dfa.table.ravel()[flat]
        keep = nxt != 0
        nodes = children[keep]
        st = nxt[keep]
    return alive_nodes[trie.token_node]


def _python_tail(dfa, trie, nodes: list[int], states: list[int], alive: np.ndarray) -> None:
    lists = trie.__dict__.get("_py_lists")
    if lists is None:
        lists = (trie.node_byte.tolist(), trie.child_start.tolist(), trie.child_end.tolist())
        trie.__dict__["_py_lists"] = lists
    node_byte, cs, ce = lists
    step = dfa.step
    todo = list(zip(nodes, states))
    while todo:
        node, q = todo.pop()
        alive[node] = True
        for child in range(cs[node], ce[node]):
            t = step(q, node_byte[child])
            if t:
                todo.append((child, t))
