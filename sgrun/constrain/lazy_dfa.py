"""Lazy determinisation of a ByteNFA with calls: DFA states are built on first use.

A runtime configuration is (NFA state, return stack); a DFA state is the frozenset of
configurations reachable after some input, closed under epsilon / call / return moves.
Bytes are grouped into classes (bytes no edge mask tells apart), and the transition table
`table[state, class]` is a numpy array filled on demand, so the token-mask walk (token_walk)
can step thousands of tokens at once and only drop into Python for unseen transitions.
State 0 is the dead state.
"""

from __future__ import annotations

import threading

import numpy as np

from sgrun.constrain.byte_nfa import ALL_BYTES, ByteNFA
from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import ConstraintTooComplexError

# (return, depth, parent) linked list; return is the state a call returns to, or for a counted
# repeat (fid, return_state, lo, hi, bodies started so far): the repeat's counter lives on the
# stack, so `maxLength: 4096` is one call edge, not 4096 unrolled copies.
Stack = tuple | None
DEFAULT_MAX_DEPTH = 160  # nested calls (sub-schemas, $ref, shared leaves) kept on the stack
DEFAULT_MAX_DFA_STATES = 200_000
_MAX_CLOSURE = 50_000
_MAX_MOVED_MEMO = 200_000


def byte_classes(masks: set[int]) -> list[int]:
    """Coarsest partition of 0..255 such that every mask is a union of classes. Single-byte
    masks (literals: most of them) just make their byte a class of its own, so only the others
    are refined one by one."""
    singles = 0
    classes = [ALL_BYTES]
    for m in masks:
        if m & (m - 1) == 0:
            singles |= m
            continue
        if m == ALL_BYTES:
            continue
        nxt = []
        for c in classes:
            a, b = c & m, c & ~m
            if a:
                nxt.append(a)
            if b:
                nxt.append(b)
        classes = nxt
    if singles:
        out = []
        for c in classes:
            rest = c & ~singles
            if rest:
                out.append(rest)
            one = c & singles
            while one:
                low = one & -one
                out.append(low)
                one ^= low
        classes = out
    classes.sort(key=lambda c: (c & -c).bit_length())
    return classes


class LazyDFA:
    exhausted = False  # set when a state cap is hit: the cache then compiles afresh (cache.py)

    def __init__(self, nfa: ByteNFA, root: int, max_depth: int = DEFAULT_MAX_DEPTH,
                 max_states: int = DEFAULT_MAX_DFA_STATES):
        self.nfa = nfa
        self.root = root
        as_lists = getattr(nfa, "as_lists", None)
        if as_lists is not None:  # a program NFA (nfa_program): its Python build
            nfa = self.nfa = as_lists()
        self.root_end = nfa.frag_end[root]
        self.max_depth = max_depth
        self.max_states = max_states
        self.lock = threading.RLock()
        classes = byte_classes(nfa.all_masks())
        self.class_masks = classes
        self.class_of = np.zeros(256, dtype=np.uint8 if len(classes) <= 256 else np.uint16)
        self.class_rep: list[int] = []
        of = [0] * 256
        for cid, m in enumerate(classes):
            self.class_rep.append((m & -m).bit_length() - 1)
            while m:
                low = m & -m
                of[low.bit_length() - 1] = cid
                m ^= low
        self.class_of[:] = of
        self.num_classes = len(classes)
        self.class_size = [m.bit_count() for m in classes]
        self._mask_classes: dict[int, tuple[int, ...]] = {}  # NFA edge mask -> classes inside it
        self._uniform: dict[tuple[int, bytes], int | None] = {}
        self._class_union: dict[bytes, int] = {}
        self._sets: list[frozenset] = []
        # moved configurations -> the state their closure interns to, across all states: a string
        # body's states (one per counter value) mostly move to configurations seen before
        self._moved: dict[tuple, int] = {}
        self._index: dict[frozenset, int] = {}
        self.accepting: list[bool] = []
        self.table = np.full((64, self.num_classes), -1, dtype=np.int32)
        self._intern(frozenset())  # dead state 0
        self.table[0, :] = 0
        self.initial = self._intern(self._closure([(nfa.frag_start[root], None)]))

    # --- configuration sets -------------------------------------------------------------
    def _closure(self, configs: list[tuple[int, Stack]]) -> frozenset:
        nfa = self.nfa
        seen = set(configs)
        todo = list(configs)
        while todo:
            s, stk = todo.pop()
            nxt: list[tuple[int, Stack]] = [(t, stk) for t in nfa.eps[s]]
            depth = stk[1] if stk is not None else 0
            for call in nfa.calls[s]:
                if len(call) == 2:
                    if depth < self.max_depth:
                        nxt.append((nfa.frag_start[call[0]], (call[1], depth + 1, stk)))
                    continue
                fid, ret, lo, hi = call  # a counted repeat of fragment fid (byte_nfa.ByteNFA.build)
                if lo == 0:
                    nxt.append((ret, stk))
                if (hi is None or hi > 0) and depth < self.max_depth:
                    nxt.append((nfa.frag_start[fid], ((fid, ret, lo, hi, 1), depth + 1, stk)))
            if stk is not None and s in nfa.end_of:
                top = stk[0]
                if type(top) is int:
                    nxt.append((top, stk[2]))
                else:  # the k-th body of a counted repeat ended: leave it, or start body k + 1
                    fid, ret, lo, hi, k = top
                    if k >= lo:
                        nxt.append((ret, stk[2]))
                    if hi is None or k < hi:
                        more = k + 1 if hi is not None or k < lo else k  # unbounded: the count saturates at lo
                        nxt.append((nfa.frag_start[fid], ((fid, ret, lo, hi, more), stk[1], stk[2])))
            for c in nxt:
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
            if len(seen) > _MAX_CLOSURE:
                raise ConstraintTooComplexError("constraint automaton closure too large (left recursion?)")
        tick(len(seen))
        root_end = self.root_end
        return frozenset(c for c in seen if nfa.edges[c[0]] or (c[0] == root_end and c[1] is None))

    def _intern(self, configs: frozenset) -> int:
        sid = self._index.get(configs)
        if sid is not None:
            return sid
        if not configs and self._sets:
            return 0
        sid = len(self._sets)
        if sid >= self.max_states:
            self.exhausted = True
            raise ConstraintTooComplexError(f"the constraint is too complex: its automaton exceeds {self.max_states} states; simplify it (fewer alternatives under repeats, smaller bounds)")
        self._sets.append(configs)
        self._index[configs] = sid
        self.accepting.append(any(s == self.root_end and stk is None for s, stk in configs))
        if sid >= self.table.shape[0]:
            grown = np.full((self.table.shape[0] * 2, self.num_classes), -1, dtype=np.int32)
            grown[: self.table.shape[0]] = self.table
            self.table = grown
        return sid

    def _compute(self, sid: int, cls: int) -> int:
        b = self.class_rep[cls]
        moved = []
        edges = self.nfa.edges
        for s, stk in self._sets[sid]:
            for m, t in edges[s]:
                if (m >> b) & 1:
                    moved.append((t, stk))
        return self._target(moved)

    def _target(self, moved: list) -> int:
        if not moved:
            return 0
        key = tuple(moved)
        got = self._moved.get(key)
        if got is None:
            if len(self._moved) > _MAX_MOVED_MEMO:
                self._moved.clear()
            got = self._moved[key] = self._intern(self._closure(moved))
        return got

    # --- public -------------------------------------------------------------------------
    @property
    def num_states(self) -> int:
        return len(self._sets)

    def step(self, sid: int, byte: int) -> int:
        cls = self.class_of[byte]
        nxt = self.table[sid, cls]
        if nxt < 0:
            nxt = self.fill(sid, int(cls))
        return int(nxt)

    def fill(self, sid: int, cls: int) -> int:
        with self.lock:
            nxt = int(self.table[sid, cls])
            if nxt < 0:
                nxt = self._compute(sid, cls)
                self.table[sid, cls] = nxt
            return nxt

    def fill_pairs(self, sids: np.ndarray, classes: np.ndarray) -> None:
        for sid, cls in zip(sids.tolist(), classes.tolist()):
            self.fill(sid, cls)

    def row(self, sid: int) -> np.ndarray:
        """All transitions of one state (filled)."""
        r = self.table[sid]
        if (r < 0).any():
            self._fill_row(sid)
            r = self.table[sid]
        return r

    def _classes_in(self, mask: int) -> tuple[int, ...]:
        got = self._mask_classes.get(mask)
        if got is None:
            got = tuple(c for c, m in enumerate(self.class_masks) if m & mask)
            self._mask_classes[mask] = got
        return got

    def uniform_target(self, sid: int, classes: np.ndarray) -> int | None:
        """The state every class in `classes` leads to from `sid` (0: dead), or None if they
        lead to different states. Decided from the NFA edges: each edge mask either holds all
        of those classes or none, so one closure answers for the whole group."""
        key = (sid, classes.tobytes())
        got = self._uniform.get(key, -1)
        if got != -1:
            return got
        union = self._class_union.get(key[1])
        if union is None:
            union = 0
            for c in classes.tolist():
                union |= self.class_masks[c]
            self._class_union[key[1]] = union
        with self.lock:
            moved = []
            for s, stk in self._sets[sid]:
                for m, t in self.nfa.edges[s]:
                    x = m & union
                    if not x:
                        continue
                    if x != union:
                        self._uniform[key] = None
                        return None
                    moved.append((t, stk))
            got = self._target(moved)
        self._uniform[key] = got
        return got

    def targets(self, sid: int, classes: np.ndarray) -> np.ndarray:
        """table[sid, classes], computing just the missing ones among `classes`."""
        got = self.table[sid, classes]
        if (got < 0).any():
            self._fill_row(sid, set(classes[got < 0].tolist()))
            got = self.table[sid, classes]
        return got

    def _fill_row(self, sid: int, only: set[int] | None = None) -> None:
        """Every class (or those in `only`) of one state in a single pass over its
        configurations: classes that move the same configurations share one closure (most
        classes of a string body do)."""
        with self.lock:
            moved: dict[int, list] = {}
            edges = self.nfa.edges
            for s, stk in self._sets[sid]:
                for m, t in edges[s]:
                    for c in self._classes_in(m):
                        got = moved.get(c)
                        if got is None:
                            moved[c] = [(t, stk)]
                        else:
                            got.append((t, stk))
            have = self.table[sid].tolist()
            todo = range(self.num_classes) if only is None else only
            empty: list = []
            for c in todo:
                if have[c] < 0:
                    have[c] = self._target(moved.get(c, empty))
            self.table[sid] = have  # (not a view taken earlier: interning may have grown the table)
