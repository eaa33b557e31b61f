"""Small eager DFAs over bytes, for leaves that need set operations (intersection, difference):
string patterns with length bounds, numeric ranges with multipleOf, property-name exclusions.

Edges are (byte mask, target) with disjoint masks; a missing byte means reject.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from sgrun.constrain.byte_nfa import ByteNFA
from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.regex_ast import Node

DEFAULT_MAX_DFA_STATES = 50_000


@dataclass
class ByteDFA:
    edges: list[list[tuple[int, int]]]
    accepting: set[int]
    start: int = 0
    _key: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def num_states(self) -> int:
        return len(self.edges)

    def step(self, s: int, b: int) -> int | None:
        for m, t in self.edges[s]:
            if (m >> b) & 1:
                return t
        return None

    def fullmatch(self, data: bytes) -> bool:
        s: int | None = self.start
        for b in data:
            s = self.step(s, b)
            if s is None:
                return False
        return s in self.accepting

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


def _partition(edge_list: list[tuple[int, object]]) -> list[tuple[int, frozenset]]:
    """Split the union of masks into atoms, each with the set of targets it reaches."""
    atoms: list[tuple[int, set]] = []
    for mask, target in edge_list:
        rest = mask
        new_atoms = []
        for am, ts in atoms:
            inter = am & mask
            if inter:
                new_atoms.append((inter, ts | {target}))
                if am & ~mask:
                    new_atoms.append((am & ~mask, ts))
                rest &= ~am
            else:
                new_atoms.append((am, ts))
        if rest:
            new_atoms.append((rest, {target}))
        atoms = new_atoms
    return [(m, frozenset(ts)) for m, ts in atoms]


def dfa_from_node(node: Node, max_states: int = DEFAULT_MAX_DFA_STATES) -> ByteDFA:
    """Subset construction of a call-free regex node."""
    nfa = ByteNFA()
    start = nfa.new_state()
    end = nfa.build(node, start)

    def closure(states: frozenset[int]) -> frozenset[int]:
        out = set(states)
        todo = list(states)
        while todo:
            s = todo.pop()
            for t in nfa.eps[s]:
                if t not in out:
                    out.add(t)
                    todo.append(t)
            assert not nfa.calls[s], "dfa_from_node needs a call-free node"
        return frozenset(x for x in out if nfa.edges[x] or x == end)

    first = closure(frozenset([start]))
    index = {first: 0}
    sets = [first]
    edges: list[list[tuple[int, int]]] = []
    i = 0
    while i < len(sets):
        cur = sets[i]
        i += 1
        raw = [(m, t) for s in cur for m, t in nfa.edges[s]]
        tick(1 + len(raw))
        out: dict[frozenset, int] = {}
        for mask, targets in _partition(raw):
            nxt = closure(targets)
            out[nxt] = out.get(nxt, 0) | mask
        row = []
        for nxt, mask in out.items():
            if nxt not in index:
                if len(sets) >= max_states:
                    raise ConstraintTooComplexError(f"the constraint is too complex: its automaton exceeds {max_states} DFA states; simplify it (fewer alternatives under repeats, smaller bounds)")
                index[nxt] = len(sets)
                sets.append(nxt)
            row.append((mask, index[nxt]))
        edges.append(row)
    accepting = {k for k, s in enumerate(sets) if end in s}
    return trim(ByteDFA(edges, accepting))


def product(a: ByteDFA, b: ByteDFA, mode: str = "and", max_states: int = DEFAULT_MAX_DFA_STATES) -> ByteDFA:
    """Intersection ("and") or difference ("minus": in a, not in b)."""
    start = (a.start, b.start)
    index = {start: 0}
    pairs = [start]
    edges: list[list[tuple[int, int]]] = []
    i = 0
    while i < len(pairs):
        sa, sb = pairs[i]
        i += 1
        tick()
        row = []
        b_edges = b.edges[sb] if sb is not None else []
        for ma, ta in a.edges[sa]:
            covered = 0
            for mb, tb in b_edges:
                m = ma & mb
                if m:
                    row.append((m, (ta, tb)))
                    covered |= m
            if mode == "minus" and ma & ~covered:
                row.append((ma & ~covered, (ta, None)))
        out_row = []
        for m, nxt in row:
            if nxt not in index:
                if len(pairs) >= max_states:
                    raise ConstraintTooComplexError(f"automaton product exceeds {max_states} DFA states")
                index[nxt] = len(pairs)
                pairs.append(nxt)
            out_row.append((m, index[nxt]))
        edges.append(out_row)
    if mode == "and":
        acc = {k for k, (x, y) in enumerate(pairs) if x in a.accepting and y in b.accepting}
    else:
        acc = {k for k, (x, y) in enumerate(pairs) if x in a.accepting and (y is None or y not in b.accepting)}
    return trim(ByteDFA(edges, acc))


def co_reachable(d: ByteDFA, targets, on_visit: Callable[[], None] | None = None) -> set[int]:
    """The states from which some state in `targets` can be reached (targets included), by one
    backward search over the reversed edges. on_visit runs once per state taken off the worklist
    (a compile-budget tick)."""
    rev: list[list[int]] = [[] for _ in range(d.num_states)]
    for s, row in enumerate(d.edges):
        for _, t in row:
            rev[t].append(s)
    seen = set(targets)
    todo = list(seen)
    while todo:
        s = todo.pop()
        for p in rev[s]:
            if p not in seen:
                seen.add(p)
                todo.append(p)
        if on_visit is not None:
            on_visit()
    return seen


def trim(d: ByteDFA) -> ByteDFA:
    """Remove states that cannot reach acceptance (so any live prefix can be completed)."""
    n = d.num_states
    live = co_reachable(d, d.accepting)
    if d.start not in live:
        return ByteDFA([[]], set())
    order = [d.start] + [s for s in range(n) if s in live and s != d.start]
    remap = {s: k for k, s in enumerate(order)}
    edges = [[(m, remap[t]) for m, t in d.edges[s] if t in live] for s in order]
    return fully_live(ByteDFA(edges, {remap[s] for s in d.accepting if s in live}))


def fully_live(d: ByteDFA) -> ByteDFA:
    """Mark `d` as one whose every state reaches acceptance (trim's output, by construction), so
    the NFA's liveness check (nfa_liveness.dfa_fully_live) need not search it again."""
    d.__dict__["_fully_live"] = True
    return d


def finite_words(d: ByteDFA, cap: int) -> list[bytes] | None:
    """Every string a trimmed `d` accepts, when they are finitely many and at most `cap`; None
    otherwise (a cycle, or too many). Counts paths first (the DFA is acyclic exactly when its
    language is finite), so an over-large language is never spelled out."""
    order: list[int] = []
    state = {d.start: 1}  # 1: on the path, 2: done
    stack = [(d.start, iter(d.edges[d.start]))]
    while stack:
        s, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            stack.pop()
            state[s] = 2
            order.append(s)
            continue
        t = nxt[1]
        if state.get(t) == 1:
            return None  # a cycle: infinitely many strings
        if t not in state:
            state[t] = 1
            stack.append((t, iter(d.edges[t])))
    count: dict[int, int] = {}
    for s in order:  # successors first
        tick()
        n = 1 if s in d.accepting else 0
        for m, t in d.edges[s]:
            n += bin(m).count("1") * count[t]
            if n > cap:
                return None
        count[s] = n
    out: list[bytes] = []
    todo: list[tuple[int, bytes]] = [(d.start, b"")]
    while todo:
        s, prefix = todo.pop()
        if s in d.accepting:
            out.append(prefix)
        for m, t in d.edges[s]:
            todo.extend((t, prefix + bytes([b])) for b in range(256) if m >> b & 1)
    return sorted(out)


def minimize(d: ByteDFA) -> ByteDFA:
    """The minimal DFA of d's language (Moore's partition refinement over trimmed states). Used
    for the big fixed leaves (string formats) that are built once and embedded in many schemas."""
    d = trim(d)
    n = d.num_states
    block = [1 if s in d.accepting else 0 for s in range(n)]
    count = len(set(block))
    while True:
        sigs: dict[tuple, int] = {}
        new_block = []
        for s in range(n):
            tick()
            by_target: dict[int, int] = {}
            for m, t in d.edges[s]:
                by_target[block[t]] = by_target.get(block[t], 0) | m
            sig = (block[s], tuple(sorted(by_target.items())))
            new_block.append(sigs.setdefault(sig, len(sigs)))
        block = new_block
        if len(sigs) == count:
            break
        count = len(sigs)
    order: dict[int, int] = {block[d.start]: 0}
    for s in range(n):
        order.setdefault(block[s], len(order))
    edges: list[list[tuple[int, int]]] = [[] for _ in range(len(order))]
    done = set()
    for s in range(n):
        b = order[block[s]]
        if b in done:
            continue
        done.add(b)
        by_target: dict[int, int] = {}
        for m, t in d.edges[s]:
            by_target[order[block[t]]] = by_target.get(order[block[t]], 0) | m
        edges[b] = [(m, t) for t, m in by_target.items()]
    return fully_live(ByteDFA(edges, {order[block[s]] for s in d.accepting}))
