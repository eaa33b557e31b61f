"""Token masks for one automaton state, by the cheapest exact method that applies:

1. sparse: few bytes are allowed (keys, literals, numbers, punctuation) -> a pure-Python walk of
   the vocabulary trie that only follows allowed bytes (tens of nodes, no numpy per depth);
   subtrees that re-enter a string body (after an escape) are decided at once by range;
1b. region (region_memo.py): text loops back to the state (a string body, free text) -> the
   mask of its local region (up to the closing quote), shared by every constraint of the
   tokenizer, plus a short walk of what follows the quote from the real state after it;
2. text chain: every text byte (printable ASCII but `"` and `\\`) leads to the same next state,
   for as long as a text token can be (string bodies, free text) -> text tokens are decided by
   length alone (one precomputed bitmask), and only the ~1.2k other tokens are walked;
3. split: dense, but text bytes lead to different states (names other than the declared
   ones) -> text tokens decided per first byte, the odd first bytes walked as in 1 (or, where
   their subtrees are big, one numpy walk of just those subtrees);
4. otherwise the breadth-first numpy walk over the whole trie.

An automaton determinised in C++ (native_dfa.NativeLazyDFA) takes none of these: its
`native_mask` walks the whole trie in one C++ pass (lazy_dfa_core.cpp), faster than any of
them. All give the same set; the automaton is anything with LazyDFA's interface (row, step,
class_of, class_size, num_classes, table, fill_pairs): LazyDFA or GrammarAutomaton.
"""

from __future__ import annotations

import numpy as np

from sgrun.constrain.region_memo import RegionMasks, region_memo
from sgrun.constrain.token_table import TokenTable
from sgrun.constrain.trie_walk import ids_of, pack, walk, walk_flags, walk_flags_multi  # noqa: F401 (pack, walk: re-exported)
from sgrun.constrain.vocab_index import TEXT_BYTES, vocab_index

SPARSE_MAX_LIVE_BYTES = 24   # allowed bytes at the state itself for trying the sparse walk
SPARSE_BUDGET = 3000         # trie edges the sparse walk may look at before giving up
MAX_CACHED_ROWS = 50_000
SHORTCUT_CHILDREN = 16       # a node with more children in a text-run state: decide its subtree at once
SHORTCUT_WORK = 8            # a range decision costs about as much as eight trie edges
SPLIT_PYTHON_TOKENS = 600    # tokens under a split's odd first bytes the Python walk may take on
CHAIN_BATCH = 16             # states along a text chain whose masks one batched walk computes
_NOT_UNIFORM = -2
_DEAD = -1  # chain step into the dead state: the state before it allows 0 text bytes


class MaskBuilder:
    def __init__(self, dfa, table: TokenTable):
        self.dfa = dfa
        self.table = table
        self.native = hasattr(dfa, "native_mask")
        self.successors: dict[int, set[int]] = {}  # state -> states its allowed tokens lead to
        self.record_successors = False
        self.stats = {"native": 0, "sparse": 0, "region": 0, "chain": 0, "split": 0, "walk": 0}
        if self.native:
            return
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
        self._ready: dict[int, np.ndarray] = {}  # masks computed ahead by a chain batch
        self._batched: set[int] = set()
        self.regions = RegionMasks(dfa, region_memo(table))

    # byte class of every trie node, for the numpy walks: built on first use (a schema whose
    # masks are all sparse or shared never needs them; ~3 ms over the whole trie)
    @property
    def _node_class(self) -> np.ndarray:
        got = self.__dict__.get("_node_class_arr")
        if got is None:
            got = self.__dict__["_node_class_arr"] = self.dfa.class_of[self.table.node_byte].astype(np.int64)
        return got

    @property
    def _special_class(self) -> np.ndarray:
        got = self.__dict__.get("_special_class_arr")
        if got is None:
            got = self.__dict__["_special_class_arr"] = self.dfa.class_of[self.vi.special.node_byte].astype(np.int64)
        return got

    # --- entry point ------------------------------------------------------------------------
    def packed(self, state: int) -> np.ndarray:
        """Packed int32 bitmask of the non-special tokens allowed from `state` (no EOS)."""
        if self.native:
            return self._native(state)
        if len(self._rows) > MAX_CACHED_ROWS:  # grammar automata are unbounded: keep caches bounded
            self._rows.clear()
            self._live.clear()
            self._chain.clear()
            self._batched.clear()
        ready = self._ready.pop(state, None)
        if ready is not None:
            self.stats["chain"] += 1
            return ready
        row = self.dfa.row(state)
        live_bytes = int(self.class_size[row != 0].sum())
        if live_bytes <= SPARSE_MAX_LIVE_BYTES:
            got = self._sparse(state)
            if got is not None:
                self.stats["sparse"] += 1
                return pack(ids_of(got), self.table.words)
        if self.dfa.uniform_target(state, self.text_classes) == state:
            # text loops back here (a string body, free text): a small region whose mask any
            # constraint may have computed already (states that tell text bytes apart, names and
            # formats, measured: their regions are mostly over MAX_REGION, a wasted walk)
            got = self.regions.packed(state)
            if got is not None:
                self.stats["region"] += 1
                return got
        if self.chain_length(state) >= 0:
            self.stats["chain"] += 1
            return self._chain_batch(state)
        got = self._split(state)
        if got is not None:
            self.stats["split"] += 1
            return got
        self.stats["walk"] += 1
        ends: set[int] | None = set() if self.record_successors else None
        flags = walk_flags_multi(self.dfa, self.table, self._node_class, [state], ends)[0]
        if ends is not None:
            self.successors[state] = ends
        return pack(self.table.token_ids[flags], self.table.words)

    def sparse_packed(self, state: int) -> np.ndarray | None:
        """packed(state) if the sparse walk (the cheap case) makes it, else None."""
        if self.native:  # every state is the cheap case
            return self._native(state)
        ready = self._ready.pop(state, None)
        if ready is not None:
            self.stats["chain"] += 1
            return ready
        if int(self.class_size[self.dfa.row(state) != 0].sum()) > SPARSE_MAX_LIVE_BYTES:
            return None
        got = self._sparse(state)
        if got is None:
            return None
        self.stats["sparse"] += 1
        return pack(ids_of(got), self.table.words)

    def _native(self, state: int) -> np.ndarray:
        self.stats["native"] += 1
        if not self.record_successors:
            return self.dfa.native_mask(state, self.table)
        ends: set[int] = set()
        words = self.dfa.native_mask(state, self.table, ends)
        self.successors[state] = ends
        return words

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

    def _sparse(self, state: int, roots: list[tuple[int, int, bytes]] | None = None) -> list | None:
        """Depth-first walk of the trie following only allowed bytes. Where it reaches a node with
        many children in a state whose text run is known (an escape or `\\u` code ending back in
        a string body), the whole subtree is decided at once from the sorted-token range under
        the node (`_subtree`). Returns token ids / id arrays, or None past the work budget."""
        vi = self.vi
        kids, node_token, root_kids = vi.kids, vi.node_token, vi.root_kids
        node_byte, cstart, cend = vi.node_byte, vi.child_start, vi.child_end
        class_of, step, rows = self.class_of, self.dfa.step, self._rows
        out: list = []
        succ: set[int] = set()
        work = 0
        if roots is None:
            roots = [(root_kids[b], t, bytes((b,))) for b, t in self._live_bytes(state) if root_kids[b] >= 0]
        stack = list(roots)
        while stack:
            node, q, prefix = stack.pop()
            tok = node_token[node]
            if tok >= 0:
                out.append(tok)
                succ.add(q)
            lo, hi = cstart[node], cend[node]
            nch = hi - lo
            if nch <= 0:
                continue
            if nch > SHORTCUT_CHILDREN and self.chain_length(q) >= 0:
                out.append(self._subtree(q, prefix))
                work += SHORTCUT_WORK
                continue
            row = rows.get(q)
            if row is None and nch <= 4:
                # a few children: step just those bytes instead of filling q's whole row
                for child in range(lo, hi):
                    b = node_byte[child]
                    t = step(q, b)
                    if t:
                        stack.append((child, t, prefix + bytes((b,))))
                work += nch
            else:
                live = self._live_bytes(q)
                if nch <= len(live):
                    row = rows[q]
                    for child in range(lo, hi):
                        b = node_byte[child]
                        t = row[class_of[b]]
                        if t:
                            stack.append((child, t, prefix + bytes((b,))))
                    work += nch
                else:
                    base = node << 8
                    for b, t in live:
                        child = kids.get(base | b)
                        if child is not None:
                            stack.append((child, t, prefix + bytes((b,))))
                    work += len(live)
            if work > SPARSE_BUDGET:
                return None
        if self.record_successors:
            self.successors[state] = succ
        return out

    def _subtree(self, q: int, prefix: bytes) -> np.ndarray:
        """Allowed tokens that start with `prefix`, given the automaton is in `q` after it and
        text runs of up to chain_length(q) bytes keep it alive: all-text remainders are decided
        by length; the few others (a quote, an escape, non-ASCII) are stepped one by one."""
        vi = self.vi
        d = len(prefix)
        r = self.chain_length(q)
        lo, hi = vi.prefix_range(prefix)
        tail = vi.sorted_tail[lo:hi]
        ok = (tail <= d) & (vi.sorted_len[lo:hi] - d <= r)
        ids = vi.sorted_ids[lo:hi]
        got = [ids[ok]]
        other = np.flatnonzero(tail > d)
        if len(other):
            step, sb = self.dfa.step, vi.sorted_bytes
            extra = []
            for k in other.tolist():
                s = q
                for b in sb[lo + k][d:]:
                    s = step(s, b)
                    if not s:
                        break
                if s:
                    extra.append(int(ids[k]))
            got.append(np.array(extra, dtype=np.int64))
        return np.concatenate(got)

    def _split(self, state: int) -> np.ndarray | None:
        """Dense state whose text bytes lead to different states (property names other than the
        declared ones, any-JSON values): decide text tokens per first byte from that byte's
        state's text run, walk the subtrees of first bytes without one, and walk the special
        tokens exactly. None if those subtrees are too big for the Python walk."""
        row = self.dfa.row(state)
        vi = self.vi
        r_byte = np.full(256, -3, dtype=np.int64)
        roots: list[tuple[int, int, bytes]] = []
        for b in TEXT_BYTES:
            q = int(row[self.class_of[b]])
            if not q:
                continue
            r = self.chain_length(q)
            if r >= 0:
                r_byte[b] = r
            elif vi.root_kids[b] >= 0:
                roots.append((vi.root_kids[b], q, bytes((b,))))
        if sum(vi.subtree_size(node) for node, _, _ in roots) > SPLIT_PYTHON_TOKENS:
            # big subtrees (first letters of declared names in an open object's key state: the
            # rest of each letter's tokens): one numpy walk of just those subtrees
            flags = walk_flags_multi(self.dfa, self.table, self._node_class, [state],
                                     start=np.array([node for node, _, _ in roots], dtype=np.int64))[0]
            rest = [self.table.token_ids[flags]]
        else:
            rest = self._sparse(state, roots) if roots else []
        if rest is None:
            return None
        ok = r_byte[vi.text_first] >= vi.text_len - 1
        bits = np.zeros(self.table.words * 32, dtype=np.bool_)
        bits[vi.text_ids[ok]] = True
        for part in rest:
            bits[part] = True
        out = np.packbits(bits, bitorder="little").view(np.int32).copy()
        vi.special_bits.set(walk_flags(self.dfa, vi.special, self._special_class, state), out)
        return out

    # --- 2. text chain ---------------------------------------------------------------------
    def _special_successors(self, state: int, flags: np.ndarray) -> set[int]:
        """States the allowed quote-holding tokens lead to (after a string: the next key, `}`...);
        text tokens lead along the chain, and the rest (non-ASCII, escapes) rarely matter first.
        Only for the compile-time warm-up."""
        out: set[int] = set()
        step, tb = self.dfa.step, self.table.token_bytes
        for tid in self.vi.special.token_ids[flags & self.vi.special_has_quote].tolist():
            q = state
            for b in tb[tid]:
                q = step(q, b)
            if q:
                out.add(q)
        return out

    def _chain_batch(self, state: int) -> np.ndarray:
        """Mask of `state`, and ready masks for the states text leads to after it (the next
        characters of a bounded string each have their own state): one batched walk of the
        special tokens serves them all, so the rest of the string costs a dict lookup."""
        states = [state]
        q = state
        while len(states) < CHAIN_BATCH:
            q = self.dfa.uniform_target(q, self.text_classes)
            if not q or q in self._batched or self.chain_length(q) < 0:
                break
            states.append(q)
        flags = walk_flags_multi(self.dfa, self.vi.special, self._special_class, states)
        if self.record_successors:
            succ = set(states[1:]) | self._special_successors(state, flags[0])
            after = self.dfa.uniform_target(states[-1], self.text_classes)
            if after and self.chain_length(after) >= 0:
                succ.add(after)  # the next batch of this string
            self.successors[state] = succ
        if len(self._ready) > 4 * CHAIN_BATCH * 16:  # unbounded automata (grammars): stay bounded
            self._ready.clear()
        out = None
        for k, q in enumerate(states):
            words = self.vi.text_upto[self.chain_length(q)].copy()
            self.vi.special_bits.set(flags[k], words)
            self._batched.add(q)
            if k == 0:
                out = words
            else:
                self._ready[q] = words
        return out

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
