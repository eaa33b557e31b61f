"""Byte-level NFA with sub-automaton calls (a recursive transition network).

A constraint is a set of fragments, each an NFA with one start and one end state. Inside a
fragment, edges consume one byte from a set (a 256-bit int mask) or are epsilon; a call edge
enters another fragment and returns to a given state when that fragment reaches its end. Calls
let a JSON Schema $ref (or any sub-schema) be compiled once however often it is used, and make
recursion possible without unrolling: the runtime keeps a return stack (lazy_dfa).
"""

from __future__ import annotations

from typing import Any

from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.nfa_liveness import LivenessWalk
from sgrun.constrain.regex_ast import Node
from sgrun.constrain.utf8_ranges import utf8_sequences

ALL_BYTES = (1 << 256) - 1
_SHARE_REPEATS_OVER = 4  # bounded repeats longer than this call one shared copy of their body
_SHARE_DFAS_OVER = 8  # embedded DFAs bigger than this are one shared fragment per NFA


def byte_mask(lo: int, hi: int) -> int:
    return ((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1)


class ByteNFA:
    def __init__(self, max_states: int = 400_000, share: bool = False):
        self.edges: list[list[tuple[int, int]]] = []
        self.eps: list[list[int]] = []
        # (fragment, return state), or (fragment, return state, lo, hi): a counted repeat
        self.calls: list[list[tuple]] = []
        self.frag_start: list[int] = []
        self.frag_end: list[int] = []
        self.end_of: dict[int, int] = {}  # end state -> fragment id
        self.max_states = max_states
        self._chars_cache: dict[Any, list[list[tuple[int, int]]]] = {}
        # share=True (the lazily determinised NFAs): a bounded repeat's body and a repeated
        # big leaf are built once as a fragment and entered by call edges, so `maxLength: 4096`
        # costs ~2 states per repeat instead of a full copy of the body per repeat, and two
        # properties with the same string leaf share one copy. Eager DFAs (dfa_from_node) need
        # call-free NFAs and keep share=False.
        self.share = share
        self._shared: dict[Node, int] = {}
        self.children: dict[int, set[int]] = {}  # fragment -> fragments it calls
        self._defining: list[set[int]] = []
        self.frag_node: dict[int, Node] = {}  # fragment -> the node it was defined from (liveness check)
        self.masks: set[int] = set()  # every edge mask ever added (the lazy DFA's byte classes)

    def __getstate__(self) -> dict:
        # A worker's NFA (compile_worker) travels without the construction-only caches (node
        # trees and their DFAs: ~70% of the pickle). Built on later, it just shares less, and
        # trim takes its graph pass (fully_live needs every fragment's node).
        state = self.__dict__.copy()
        state.update(_shared={}, _chars_cache={}, frag_node={}, _defining=[])
        return state

    # --- construction -----------------------------------------------------------------
    def new_state(self) -> int:
        if len(self.edges) >= self.max_states:
            raise ConstraintTooComplexError(
                f"the constraint is too complex: its automaton exceeds {self.max_states} NFA states; reduce repeat counts, "
                f"string length bounds or schema size")
        tick()
        self.edges.append([])
        self.eps.append([])
        self.calls.append([])
        return len(self.edges) - 1

    def new_states(self, n: int) -> int:
        """n fresh states in a row; returns the first."""
        first = len(self.edges)
        if first + n > self.max_states:
            self.new_state()  # raises the size error
        tick(n)
        self.edges.extend([] for _ in range(n))
        self.eps.extend([] for _ in range(n))
        self.calls.extend([] for _ in range(n))
        return first

    def new_fragment(self) -> int:
        fid = len(self.frag_start)
        start, end = self.new_state(), self.new_state()
        self.frag_start.append(start)
        self.frag_end.append(end)
        self.end_of[end] = fid
        return fid

    def define_fragment(self, fid: int, node: Node) -> None:
        called: set[int] = set()
        self._defining.append(called)
        try:
            end = self.build(node, self.frag_start[fid])
        finally:
            self._defining.pop()
        self.children[fid] = called
        self.frag_node[fid] = node
        self.eps[end].append(self.frag_end[fid])

    def longest_call_chain(self, root: int) -> int:
        """Most nested calls on any call path from `root` that does not repeat a fragment
        (iterative; a recursive cycle counts once around)."""
        best: dict[int, int] = {}
        on_path: set[int] = set()
        stack: list[tuple[int, list[int]]] = [(root, sorted(self.children.get(root, ())))]
        on_path.add(root)
        while stack:
            fid, todo = stack[-1]
            if todo:
                child = todo.pop()
                if child in on_path or child in best:
                    continue
                on_path.add(child)
                stack.append((child, sorted(self.children.get(child, ()))))
                continue
            stack.pop()
            on_path.discard(fid)
            best[fid] = 1 + max((best.get(c, 0) for c in self.children.get(fid, ()) if c not in on_path), default=0)
        return best.get(root, 1) - 1

    def build(self, node: Node, cur: int) -> int:
        """Add `node` starting at state `cur`; return its end state."""
        kind = node[0]
        if kind == "bytes":
            data = node[1]
            if not data:
                return cur
            first = self.new_states(len(data))
            edges = self.edges
            edges[cur].append((1 << data[0], first))
            for k in range(1, len(data)):
                edges[first + k - 1].append((1 << data[k], first + k))
            self.masks.update(1 << b for b in data)
            return first + len(data) - 1
        if kind == "byteset":
            nxt = self.new_state()
            if node[1]:
                self.edges[cur].append((node[1], nxt))
                self.masks.add(node[1])
            return nxt
        if kind == "chars":
            return self._build_chars(node[1], cur)
        if kind == "seq":
            for child in node[1]:
                cur = self.build(child, cur)
            return cur
        if kind == "alt":
            end = self.new_state()
            for child in node[1]:
                entry = self.new_state()  # fresh entry so loops in one branch never leak into another
                self.eps[cur].append(entry)
                self.eps[self.build(child, entry)].append(end)
            return end
        if kind == "rep":
            _, child, lo, hi = node
            if self.share and (hi if hi is not None else lo) > _SHARE_REPEATS_OVER:
                # A counted call: one shared copy of the body, entered again and again with the
                # count on the runtime stack (lazy_dfa), so the NFA does not grow with the bound.
                fid = child[1] if child[0] == "call" else self.shared(child)[1]
                if self._defining:
                    self._defining[-1].add(fid)
                nxt = self.new_state()
                self.calls[cur].append((fid, nxt, lo, hi))
                return nxt
            for _ in range(lo):
                cur = self.build(child, cur)
            if hi is None:
                loop = self.new_state()
                self.eps[cur].append(loop)
                self.eps[self.build(child, loop)].append(loop)
                out = self.new_state()
                self.eps[loop].append(out)
                return out
            end = self.new_state()
            for _ in range(hi - lo):
                self.eps[cur].append(end)
                cur = self.build(child, cur)
            self.eps[cur].append(end)
            return end
        if kind == "call":
            if self._defining:
                self._defining[-1].add(node[1])
            nxt = self.new_state()
            self.calls[cur].append((node[1], nxt))
            return nxt
        if kind == "dfa":
            if self.share and node[1].num_states > _SHARE_DFAS_OVER:
                return self.build(self.shared(node), cur)
            return self._embed_dfa(node[1], cur)
        if kind == "members":
            return self._build_members(node, cur)
        raise AssertionError(f"unknown regex node {kind!r}")

    def shared(self, node: Node) -> Node:
        """A call to the one fragment holding `node` (built on first use)."""
        fid = self._shared.get(node)
        if fid is None:
            fid = self.new_fragment()
            self._shared[node] = fid
            if node[0] == "dfa":  # (define_fragment would build this node as a shared call again)
                self.children[fid] = set()
                self.frag_node[fid] = node
                self.eps[self._embed_dfa(node[1], self.frag_start[fid])].append(self.frag_end[fid])
            else:
                self.define_fragment(fid, node)
        return ("call", fid)

    def _build_members(self, node: Node, cur: int) -> int:
        """Object members in a fixed order, each required or optional, then any number of
        `extra` members, separated by `sep`. Lanes count the members emitted so far (0 decides
        that no separator comes first); linear in the member count times the lanes.

        An optional fifth element (lo, hi) bounds the member count (minProperties /
        maxProperties). Extra members may repeat a key (the automaton cannot compare keys), so
        toward `lo` they count once at most (a parsed object keeps one of a repeated key);
        toward `hi` every one counts."""
        _, members, extra, sep = node[:4]
        lo, hi = node[4] if len(node) > 4 else (0, None)
        top = hi if hi is not None else max(lo, 1)  # without hi the count saturates at top

        def bump(c: int) -> int | None:
            if hi is None:
                return min(c + 1, top)
            return c + 1 if c < hi else None

        lanes = [cur] + [self.new_state() for _ in range(top)]
        for member, required in members:
            new = [self.new_state() for _ in range(top + 1)]
            for c in range(top + 1):
                if not required:
                    self.eps[lanes[c]].append(new[c])
                n = bump(c)
                if n is not None:
                    start = lanes[c] if c == 0 else self.build(sep, lanes[c])
                    self.eps[self.build(member, start)].append(new[n])
            lanes = new
        end = self.new_state()
        for c in range(lo, top + 1):
            self.eps[lanes[c]].append(end)
        if extra is not None:
            for c in range(top + 1):
                # loop[e]: e >= 1 extras after c declared members (e up to hi - c; without hi 1 stands for "some")
                e_top = (hi - c) if hi is not None else 1
                if e_top < 1:
                    continue
                loop = [self.new_state() for _ in range(e_top + 1)]
                start = lanes[c] if c == 0 else self.build(sep, lanes[c])
                self.eps[self.build(extra, start)].append(loop[1])
                for e in range(1, e_top + 1):
                    if hi is None:
                        self.eps[self.build(extra, self.build(sep, loop[e]))].append(loop[e])
                    elif e < e_top:
                        self.eps[self.build(extra, self.build(sep, loop[e]))].append(loop[e + 1])
                    if min(c + 1, top if hi is None else hi) >= lo:
                        self.eps[loop[e]].append(end)
        return end

    def _char_seqs(self, ranges: tuple[tuple[int, int], ...]) -> list[list[tuple[int, int]]]:
        seqs = self._chars_cache.get(ranges)
        if seqs is None:
            seqs = [s for lo, hi in ranges for s in utf8_sequences(lo, hi)]
            self._chars_cache[ranges] = seqs
            self.masks.update(byte_mask(lo, hi) for sq in seqs for lo, hi in sq)
        return seqs

    def _build_chars(self, ranges: tuple[tuple[int, int], ...], cur: int) -> int:
        seqs = self._char_seqs(ranges)
        end = self.new_state()
        # Group by sequence length, single-byte sequences share one edge.
        single = 0
        for s in seqs:
            if len(s) == 1:
                single |= byte_mask(*s[0])
                continue
            st = cur
            for i, (lo, hi) in enumerate(s):
                nxt = end if i == len(s) - 1 else self.new_state()
                self.edges[st].append((byte_mask(lo, hi), nxt))
                st = nxt
        if single:
            self.edges[cur].append((single, end))
        return end

    def _embed_dfa(self, dfa: Any, cur: int) -> int:
        n = dfa.num_states
        base = self.new_states(n + 1)
        end = base + n
        edges, eps = self.edges, self.eps
        for s, row in enumerate(dfa.edges):
            if row:
                edges[base + s] = [(mask, base + t) for mask, t in row]
        for s in dfa.accepting:
            eps[base + s].append(end)
        eps[cur].append(base + dfa.start)
        self.masks.update(_dfa_masks(dfa))
        return end

    # --- analysis -----------------------------------------------------------------------
    def nonempty_fragments(self) -> set[int]:
        """Fragments whose language is non-empty."""
        alive = self._alive()
        return {f for f, start in enumerate(self.frag_start) if alive[start]}

    def fully_live(self) -> bool:
        """Whether every state can reach its fragment's end, decided on the fragments' nodes
        (far smaller than the NFA): true when every sub-node of every fragment has a non-empty
        language, calls included, because each construction in `build` then only makes states
        on a path from its entry to its exit. Fragment emptiness is a least fixpoint (recursion
        without a base case is empty): rounds until no fragment changes, usually one. When this
        says false, trim does the full pass."""
        if len(self.frag_node) != len(self.frag_start):
            return False  # a fragment allocated but never defined is empty
        known: dict[int, bool] = {}  # fragment -> non-empty, from the previous round
        try:
            while True:
                walk = LivenessWalk(self, known)
                for f in self.frag_node:
                    walk.fragment(f)
                if not walk.stale or walk.done == known:
                    return not walk.dirty
                known = walk.done
        except RecursionError:
            return False

    def _alive(self) -> list[bool]:
        """alive[s]: from s the end of s's fragment can be reached, entering only fragments that
        can themselves complete. One backward pass from every fragment end (linear in the NFA):
        a call edge s -(f)-> r makes s alive once r is alive and f's start is alive, so callers
        wait on their callee and are released when it turns out non-empty."""
        n = len(self.edges)
        rev: list[list[int]] = [[] for _ in range(n)]
        rev_call: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for src in range(n):
            for _, t in self.edges[src]:
                rev[t].append(src)
            for t in self.eps[src]:
                rev[t].append(src)
            for call in self.calls[src]:
                if len(call) == 4 and call[2] == 0:
                    rev[call[1]].append(src)  # a counted repeat that may run zero times
                else:
                    rev_call[call[1]].append((src, call[0]))
        tick(n)
        start_of = {st: f for f, st in enumerate(self.frag_start)}
        alive = [False] * n
        waiting: dict[int, list[int]] = {}
        todo = list(self.frag_end)
        for x in todo:
            alive[x] = True
        while todo:
            x = todo.pop()
            nxt = list(rev[x])
            for src, f in rev_call[x]:
                if alive[self.frag_start[f]]:
                    nxt.append(src)
                else:
                    waiting.setdefault(f, []).append(src)
            f = start_of.get(x)
            if f is not None:
                nxt.extend(waiting.pop(f, ()))
            for p in nxt:
                if not alive[p]:
                    alive[p] = True
                    todo.append(p)
        return alive

    def trim(self) -> set[int]:
        """Drop calls into empty fragments and edges into states that cannot reach their
        fragment's end, so every live runtime configuration can still complete. Returns the
        non-empty fragments."""
        if self.fully_live():
            return set(range(len(self.frag_start)))
        alive = self._alive()
        nonempty = {f for f, start in enumerate(self.frag_start) if alive[start]}
        for s in range(len(self.edges)):
            if not alive[s]:
                self.edges[s], self.eps[s], self.calls[s] = [], [], []
                continue
            self.edges[s] = [(m, t) for m, t in self.edges[s] if alive[t]]
            self.eps[s] = [t for t in self.eps[s] if alive[t]]
            calls = []
            for call in self.calls[s]:
                if not alive[call[1]]:
                    continue
                if call[0] in nonempty:
                    calls.append(call)
                elif len(call) == 4 and call[2] == 0:
                    self.eps[s].append(call[1])  # a repeat of an empty body: zero times only
            self.calls[s] = calls
        return nonempty

    def all_masks(self) -> set[int]:
        """Every edge mask (a superset after trim removed edges: classes only get finer)."""
        return self.masks


def _dfa_masks(dfa: Any) -> set[int]:
    got = dfa.__dict__.get("_masks")
    if got is None:
        got = dfa.__dict__["_masks"] = {m for row in dfa.edges for m, _ in row}
    return got


def nfa_from_node(node: Node, nfa: ByteNFA | None = None) -> tuple[ByteNFA, int]:
    """A regular expression's AST as a shared NFA (a fresh one, or `nfa`: e.g. a program NFA,
    nfa_program) and its root fragment."""
    nfa = nfa if nfa is not None else ByteNFA(share=True)
    root = nfa.new_fragment()
    nfa.define_fragment(root, node)
    nfa.sealed = True
    return nfa, root
