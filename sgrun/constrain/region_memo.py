"""Token masks shared across constraints: a state's mask from the shape of its *local region*.

The local region of an automaton state q is every state reachable from q without crossing the
exit byte `"` (the quote that ends a JSON string: a string body, a key, a pattern or format
string; or no exit at all: free text). A string body is ~10 states (the body, after `\\`, the
`\\u` digits, the UTF-8 continuation bytes) whatever the schema around it. Its *signature* is
the region written canonically: states numbered in the order a byte-ordered breadth-first walk
meets them, and for each state and byte 0..255 the number of the target (or dead), with the
exit byte only recorded as alive or dead. Two states with the same signature, in any two
constraints, decide every token the same way up to its first exit: so the mask splits exactly
into
- *inside*: tokens that never reach an exit and stay alive (one packed mask per signature);
- *exits*: for each region state k that the exit byte leaves alive, the tokens whose first exit
  is from k, kept as a trie of what follows the quote. From the real state after the quote
  (usually `,` `}` `]` `:` and little else) a short walk of that trie decides them all.

The first state of a signature costs one numpy walk of the vocabulary trie over the canonical
region (a few ms); every later state with that signature, in any constraint of the tokenizer,
costs the region's walk (its rows) and the exit trie walk. The unconstrained JSON string body
is computed before the first compile (`seed`), so even a process's first schema finds it.
Exact: the signature holds every transition inside the region and nothing outside it matters
before the exit, which the exit walk takes from the real state.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from sgrun.constrain.token_table import TokenTable
from sgrun.constrain.vocab_index import VocabIndex, vocab_index

EXIT = 0x22              # `"`
MAX_REGION = 40          # region states; larger regions (bounded strings: one state per count) go elsewhere
MAX_ENTRIES = 2048       # signatures kept per tokenizer (an entry: one packed mask and its exit tries)
_ALIVE_EXIT = -2         # canonical code of an exit byte that leaves the state alive


@dataclass
class SuffixNode:
    """What follows the quote, for the tokens of one exit state: a trie of suffix bytes."""
    kids: dict[int, "SuffixNode"]
    ids: list[int]


@dataclass
class RegionEntry:
    inside: np.ndarray               # packed int32 words: tokens that stay alive inside the region
    exits: dict[int, SuffixNode]     # canonical exit state -> trie of what follows the quote


class RegionMemo:
    """Per-tokenizer memo: region signature -> RegionEntry (bounded LRU, thread-safe)."""

    def __init__(self, table: TokenTable):
        self.table = table
        self.vi: VocabIndex = vocab_index(table)
        self._entries: OrderedDict[bytes, RegionEntry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes, region_table: np.ndarray) -> RegionEntry:
        with self._lock:
            got = self._entries.get(key)
            if got is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return got
        entry = self._build(region_table)
        with self._lock:
            self.misses += 1
            self._entries[key] = entry
            while len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)
        return entry

    def _build(self, local: np.ndarray) -> RegionEntry:
        """Walk the whole vocabulary trie over the canonical region (rows 1..K, 0 dead; an alive
        exit is -1), breadth-first, a depth per numpy step."""
        t, vi = self.table, self.vi
        alive = np.zeros(t.num_nodes, dtype=np.bool_)
        nodes = t.depth1
        st = np.ones(len(nodes), dtype=np.int64)
        exit_nodes: list[np.ndarray] = []
        exit_states: list[np.ndarray] = []
        flat = local.ravel()
        while len(nodes):
            nxt = flat[st * 256 + t.node_byte[nodes]]
            ex = nxt == -1
            if ex.any():
                exit_nodes.append(nodes[ex])
                exit_states.append(st[ex] - 1)
            keep = nxt > 0
            nodes, st = nodes[keep], nxt[keep].astype(np.int64)
            alive[nodes] = True
            cs = t.child_start[nodes]
            cnt = t.child_end[nodes] - cs
            has = cnt > 0
            cs, cnt, st = cs[has], cnt[has], st[has]
            total = int(cnt.sum())
            if not total:
                break
            offsets = np.cumsum(cnt) - cnt
            nodes = np.repeat(cs - offsets, cnt) + np.arange(total)
            st = np.repeat(st, cnt)
        inside = pack_ids(t.token_ids[alive[t.token_node]], t.words)
        exits: dict[int, SuffixNode] = {}
        for n_arr, k_arr in zip(exit_nodes, exit_states):
            for node, k in zip(n_arr.tolist(), k_arr.tolist()):
                prefix = vi.node_prefix(node)
                lo, hi = vi.prefix_range(prefix)
                root = exits.setdefault(k, SuffixNode({}, []))
                d = len(prefix)
                for j in range(lo, hi):
                    cur = root
                    for b in vi.sorted_bytes[j][d:]:
                        nxt_node = cur.kids.get(b)
                        if nxt_node is None:
                            nxt_node = cur.kids[b] = SuffixNode({}, [])
                        cur = nxt_node
                    cur.ids.append(int(vi.sorted_ids[j]))
        return RegionEntry(inside, exits)


def pack_ids(ids: np.ndarray, words: int) -> np.ndarray:
    bits = np.zeros(words * 32, dtype=np.bool_)
    bits[ids] = True
    return np.packbits(bits, bitorder="little").view(np.int32).copy()


class RegionMasks:
    """One automaton's side: computes signatures (cached per state) and masks from the memo."""

    def __init__(self, dfa, memo: RegionMemo):
        self.dfa = dfa
        self.memo = memo
        self.class_of = np.asarray(dfa.class_of, dtype=np.int64)
        reps = dfa.class_rep
        self.order = sorted(range(dfa.num_classes), key=lambda c: reps[c])  # classes in byte order
        self.exit_cls = int(self.class_of[EXIT])
        self.exit_alone = dfa.class_size[self.exit_cls] == 1
        self._region: dict[int, tuple[bytes, list[int], np.ndarray] | None] = {}

    def region(self, q: int) -> tuple[bytes, list[int], np.ndarray] | None:
        """(signature, the region's states in canonical order, canonical table) or None if the
        region is larger than MAX_REGION (or `"` shares its byte class)."""
        if q in self._region:
            return self._region[q]
        got = self._walk(q) if self.exit_alone else None
        self._region[q] = got
        return got

    def _walk(self, q: int):
        dfa, order, ex = self.dfa, self.order, self.exit_cls
        states = [q]
        index = {q: 0}
        rows: list[list[int]] = []
        i = 0
        while i < len(states):
            row = dfa.row(states[i]).tolist()
            canon = [0] * len(row)
            for c in order:
                t = row[c]
                if c == ex:
                    canon[c] = _ALIVE_EXIT if t else -1
                elif t == 0:
                    canon[c] = -1
                else:
                    k = index.get(t)
                    if k is None:
                        if len(states) >= MAX_REGION:
                            return None
                        k = index[t] = len(states)
                        states.append(t)
                    canon[c] = k
            rows.append(canon)
            i += 1
        per_byte = np.asarray(rows, dtype=np.int16)[:, self.class_of]   # [K, 256]
        key = per_byte.tobytes()
        local = np.zeros((len(states) + 1, 256), dtype=np.int32)
        local[1:] = np.where(per_byte == _ALIVE_EXIT, -1, per_byte + 1)  # dead -1 -> 0, k -> k + 1
        return key, states, local

    def packed(self, q: int) -> np.ndarray | None:
        """q's mask (packed int32, no EOS), or None if q's region is too large."""
        got = self.region(q)
        if got is None:
            return None
        key, states, local = got
        entry = self.memo.get(key, local)
        out = entry.inside.copy()
        if entry.exits:
            dfa = self.dfa
            ids: list[int] = []
            for k, root in entry.exits.items():
                after = dfa.step(states[k], EXIT)
                if after:
                    _walk_suffixes(dfa, root, after, ids)
            if ids:
                arr = np.asarray(ids, dtype=np.int64)
                np.bitwise_or.at(out.view(np.uint32), arr >> 5, np.left_shift(np.uint32(1), (arr & 31).astype(np.uint32)))
        return out


def _walk_suffixes(dfa, root: SuffixNode, state: int, ids: list[int]) -> None:
    step = dfa.step
    stack = [(root, state)]
    while stack:
        node, s = stack.pop()
        if node.ids:
            ids.extend(node.ids)
        for b, child in node.kids.items():
            t = step(s, b)
            if t:
                stack.append((child, t))


_memos: dict[str, RegionMemo] = {}
_memos_lock = threading.Lock()


def region_memo(table: TokenTable) -> RegionMemo:
    with _memos_lock:
        got = _memos.get(table.fingerprint)
        if got is None:
            got = _memos[table.fingerprint] = RegionMemo(table)
            seed(got)
        return got


def seed(memo: RegionMemo) -> None:
    """Precompute the common lexical classes: the body of an unconstrained JSON string (values
    and keys alike), in the compact and the spaced whitespace forms' automata."""
    from sgrun.constrain.json_schema import schema_to_nfa
    from sgrun.constrain.lazy_dfa import LazyDFA
    for schema, opening in (({"type": "string"}, b'"'), ({"type": "object"}, b'{"')):
        nfa, root, _ = schema_to_nfa(schema)
        dfa = LazyDFA(nfa, root)
        q = dfa.initial
        for b in opening:
            q = dfa.step(q, b)
        if q:
            RegionMasks(dfa, memo).packed(q)
