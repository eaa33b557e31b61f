"""Exactly one of several schema branches, built as one automaton: exact oneOf whose branches
may overlap, and through it `not` (rest AND NOT n = exactly one of [rest, rest AND n]) and
if/then/else whose condition has no positive complement.

Each branch's node is inlined into a call-free node and determinised (byte_dfa); a product
explored lazily from the start, only over the tuples of branch states a prefix can reach,
accepts where one branch in the key order asked for accepts (the gate: what may be written) and
exactly one branch in any key order does (a value matches a branch whatever order its keys
are written in), and the text spells its strings and numbers the one way json.dumps does (no
exponents, trailing fraction zeros or optional escapes: a value spelled two ways could match a
branch in one spelling and not in the other's automaton, e.g. 1.0 for an integer). Every step counts against the compile budget and the
product is capped at `max_states`: past either, a ConstraintTooComplexError names the keyword.

Values of unbounded nesting (any JSON value, a recursive $ref) are not regular. Their calls are
unrolled `depth` levels and, below that, stand as one opaque symbol each: a byte that never
occurs in UTF-8 text (0xF5-0xFF), which the finished automaton turns back into a call of that
fragment. That is exact wherever, at a tuple with two or more live branches, no live branch can
also spell the called value's first byte another way (or through another opaque call): then
every branch that reads the value reads it through the same call, the call's language is the
same for all of them, and JSON's delimiters end the value in the same place for all. A tuple
that breaks the rule is unrolled one level deeper, up to MAX_UNROLL; past it the caller refuses
the keyword, naming the branches that both admit values of unbounded nesting at one place.
"""

from __future__ import annotations

from typing import Callable

from sgrun.constrain.byte_dfa import DEFAULT_MAX_DFA_STATES, ByteDFA, _partition, dfa_from_node, trim
from sgrun.constrain.byte_nfa import ALL_BYTES, ByteNFA
from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.regex_ast import Node

MARKER_BYTES = tuple(range(0xF5, 0x100))  # never in UTF-8: each stands for one opaque call
MARKER_MASK = sum(1 << b for b in MARKER_BYTES)
MAX_UNROLL = 2  # levels a recursive call is unrolled before a conflict is refused (any JSON value
# unrolled 2 levels is a 2,795-state DFA, 3 levels 11,307: each level quadruples it)
DEFAULT_MAX_PRODUCT_STATES = 20_000


class NotBuildable(Exception):
    """The branches cannot be told apart exactly by this construction; str(e) says why."""


class _Conflict(Exception):
    """Two live branches may read one value through different paths: unroll deeper."""


def _node_masks(node: Node) -> int:
    """Every byte a leaf of `node` may read (OR of its masks); bytes, bytesets and DFAs only."""
    kind = node[0]
    if kind == "bytes":
        return sum(1 << b for b in set(node[1]))
    if kind == "byteset":
        return node[1]
    if kind == "dfa":
        m = 0
        for row in node[1].edges:
            for mask, _ in row:
                m |= mask
        return m
    return 0


class Inliner:
    """Call-free copies of fragment nodes, recursive calls unrolled `depth` levels and opaque
    (a marker byte each) below that."""

    def __init__(self, nfa: ByteNFA, fragment_node: Callable[[int], Node | None], depth: int):
        self.nfa = nfa
        self.fragment_node = fragment_node
        self.depth = depth
        self.markers: dict[int, int] = {}  # fragment -> its marker byte
        self._active: dict[int, int] = {}
        self._memo: dict[tuple, Node] = {}

    def marker(self, fid: int) -> Node:
        b = self.markers.get(fid)
        if b is None:
            if getattr(self.nfa, "is_lists", True) is False:
                # an opaque call: the product will need the built graph (first_bytes) and write
                # states (embed_with_calls); say so now, before any DFA of this product is built
                from sgrun.constrain.nfa_program import NeedsListNFA
                raise NeedsListNFA("exactly-one product with calls")
            if len(self.markers) >= len(MARKER_BYTES):
                raise NotBuildable(f"more than {len(MARKER_BYTES)} distinct recursive sub-schemas take part")
            b = self.markers[fid] = MARKER_BYTES[len(self.markers)]
        return ("bytes", bytes([b]))

    def inline(self, node: Node) -> Node:
        tick()
        kind = node[0]
        if kind == "call":
            fid = node[1]
            body = self.fragment_node(fid)
            if body is None or self._active.get(fid, 0) > self.depth:
                return self.marker(fid)
            key = (fid, tuple(sorted(self._active.items())))
            got = self._memo.get(key)
            if got is None:
                self._active[fid] = self._active.get(fid, 0) + 1
                try:
                    got = self.inline(body)
                finally:
                    self._active[fid] -= 1
                self._memo[key] = got
            return got
        if kind in ("seq", "alt"):
            return (kind, tuple(self.inline(c) for c in node[1]))
        if kind == "rep":
            return ("rep", self.inline(node[1]), node[2], node[3])
        if kind == "members":
            _, members, extra, sep = node[:4]
            return ("members", tuple((self.inline(m), req) for m, req in members),
                    None if extra is None else self.inline(extra), self.inline(sep)) + tuple(node[4:])
        if kind in ("bytes", "byteset", "dfa") and _node_masks(node) & MARKER_MASK:
            raise NotBuildable("a leaf reads bytes that are not UTF-8 text")
        return node


def first_bytes(nfa: ByteNFA, fid: int, fragment_node: Callable[[int], Node | None]) -> int:
    """A superset of the first bytes of fragment `fid`'s words (calls entered and, in case they
    are nullable, also skipped); every byte when a fragment on the way is not defined yet."""
    mask = 0
    seen: set[int] = set()
    todo = []

    def enter(f: int) -> bool:
        if fragment_node(f) is None:
            return False
        todo.append(nfa.frag_start[f])
        return True

    if not enter(fid):
        return ALL_BYTES
    while todo:
        s = todo.pop()
        if s in seen:
            continue
        seen.add(s)
        tick()
        for m, _ in nfa.edges[s]:
            mask |= m
        todo.extend(nfa.eps[s])
        for call in nfa.calls[s]:
            todo.append(call[1])
            if not enter(call[0]):
                return ALL_BYTES
    return mask


def _canonical_spelling_dfa() -> ByteDFA:
    """Texts whose strings and numbers are spelled as json.dumps(v, ensure_ascii=False) spells
    them (raw UTF-8; escapes only for `"`, `\\` and control characters, in its short or
    lowercase \\u00xx form; numbers without exponent, trailing fraction zeros or -0), anything
    else outside those tokens (structure, literals, whitespace, marker bytes). One spelling per
    value is what lets the count of branches a value matches be read off its text."""
    OUT, STR, ESC, U1, U2, U3, U4_0, U4_1, MINUS, MINUS0, ZERO, INT, FRAC_Z, FRAC_NZ = range(14)
    rows: list[dict[int, int]] = [dict() for _ in range(14)]
    digits, nonzero = range(0x30, 0x3A), range(0x31, 0x3A)
    number_bytes = set(digits) | {0x2D, 0x2E, 0x2B, 0x45, 0x65}  # after a number: not one of these

    def out_edges(row: dict[int, int], skip: set[int]) -> None:
        for b in range(256):
            if b in skip:
                continue
            if b == 0x22:
                row[b] = STR
            elif b == 0x2D:
                row[b] = MINUS
            elif b == 0x30:
                row[b] = ZERO
            elif b in nonzero:
                row[b] = INT
            else:
                row[b] = OUT

    out_edges(rows[OUT], set())
    for b in range(256):
        if b == 0x22:
            rows[STR][b] = OUT
        elif b == 0x5C:
            rows[STR][b] = ESC
        elif b >= 0x20 and b not in (0xC0, 0xC1) and b < 0xF5:
            rows[STR][b] = STR
    for b in b'"\\bfnrt':
        rows[ESC][b] = STR
    rows[ESC][0x75] = U1
    rows[U1][0x30] = U2
    rows[U2][0x30] = U3
    rows[U3][0x30] = U4_0
    rows[U3][0x31] = U4_1
    for b in b"01234567bef":  # \u0008 \u0009 \u000a \u000c \u000d have short forms
        rows[U4_0][b] = STR
    for b in b"0123456789abcdef":
        rows[U4_1][b] = STR
    rows[MINUS][0x30] = MINUS0
    for b in nonzero:
        rows[MINUS][b] = INT
    rows[MINUS0][0x2E] = FRAC_Z
    for b in digits:
        rows[INT][b] = INT
    rows[INT][0x2E] = FRAC_Z
    rows[ZERO][0x2E] = FRAC_Z
    for b in digits:
        rows[FRAC_Z][b] = FRAC_NZ if b != 0x30 else FRAC_Z
        rows[FRAC_NZ][b] = FRAC_NZ if b != 0x30 else FRAC_Z
    for st in (INT, ZERO, FRAC_NZ):  # a number ends at any byte that cannot continue it
        out_edges(rows[st], number_bytes | set(rows[st]))
    edges = []
    for row in rows:
        by_target: dict[int, int] = {}
        for b, tgt in row.items():
            by_target[tgt] = by_target.get(tgt, 0) | (1 << b)
        edges.append([(m, tgt) for tgt, m in by_target.items()])
    return ByteDFA(edges, {OUT, ZERO, INT, FRAC_NZ})


CANONICAL_SPELLING = _canonical_spelling_dfa()


def exactly_one_dfa(dfas: list[ByteDFA], first_of_marker: dict[int, int],
                    max_states: int = DEFAULT_MAX_PRODUCT_STATES, gates: int = 1,
                    unchecked: frozenset = frozenset()) -> ByteDFA:
    """The product of `dfas` accepting where the first `gates` of them (what may be written)
    all accept and exactly one of the others does (trimmed); a gate's death ends a path. Raises
    _Conflict where two live components may read a marker's value different ways (components in
    `unchecked`, a lexical filter, take no part in that check)."""
    start = tuple(d.start for d in dfas)
    index = {start: 0}
    tuples = [start]
    edges: list[list[tuple[int, int]]] = []
    i = 0
    while i < len(tuples):
        cur = tuples[i]
        i += 1
        raw = []
        alive = 0
        byte_union = 0
        markers = 0
        per_bytes = []
        for k, s in enumerate(cur):
            if s is None:
                continue
            row = dfas[k].edges[s]
            m_all = 0
            for m, t in row:
                raw.append((m, (k, t)))
                m_all |= m
            if k in unchecked:
                continue
            if row:
                alive += 1
            per_bytes.append(m_all & ~MARKER_MASK)
            markers |= m_all & MARKER_MASK
            byte_union |= m_all
        tick(1 + len(raw))
        if alive >= 2 and markers:
            for b in MARKER_BYTES:
                if markers >> b & 1:
                    first = first_of_marker[b]
                    others = markers & ~(1 << b)
                    clash = any(pb & first for pb in per_bytes) or any(
                        others >> o & 1 and first_of_marker[o] & first for o in MARKER_BYTES)
                    if clash:
                        raise _Conflict()
        row_out = []
        for mask, targets in _partition(raw):
            nxt = [None] * len(dfas)
            for k, t in targets:
                nxt[k] = t
            if any(nxt[g] is None for g in range(gates)):
                continue
            nxt_t = tuple(nxt)
            j = index.get(nxt_t)
            if j is None:
                if len(tuples) >= max_states:
                    raise ConstraintTooComplexError(f"exceeds {max_states} product states")
                j = index[nxt_t] = len(tuples)
                tuples.append(nxt_t)
            row_out.append((mask, j))
        edges.append(row_out)
    accepting = {j for j, t in enumerate(tuples) if all(t[g] in dfas[g].accepting for g in range(gates))
                 and sum(1 for k, s in enumerate(t) if k >= gates and s is not None and s in dfas[k].accepting) == 1}
    return trim(ByteDFA(edges, accepting))


def exactly_one_node(nfa: ByteNFA, branches: list[Node], counted: list[Node],
                     fragment_node: Callable[[int], Node | None], max_states: int = DEFAULT_MAX_PRODUCT_STATES) -> Node:
    """A node for "one of `branches`, and exactly one of `counted`" (nodes that may call
    fragments of `nfa`; counted[i] is branches[i] in every key order, so that a value counts
    for a branch whatever order the output writes its keys in): a DFA node when no opaque call
    is left, else a call of a new fragment holding the product with its marker edges turned back
    into calls. Raises NotBuildable (why) or ConstraintTooComplexError (past the state cap or
    the compile budget)."""
    for depth in range(MAX_UNROLL + 1):
        inliner = Inliner(nfa, fragment_node, depth)
        inlined = [inliner.inline(("alt", tuple(branches)))] + [inliner.inline(b) for b in counted]
        try:
            dfas = [dfa_from_node(n, max_states=min(max_states, DEFAULT_MAX_DFA_STATES)) for n in inlined]
        except ConstraintTooComplexError:
            raise ConstraintTooComplexError(f"a branch's automaton exceeds {max_states} states") from None
        first = {b: first_bytes(nfa, fid, fragment_node) for fid, b in inliner.markers.items()}
        try:
            product = exactly_one_dfa([dfas[0], CANONICAL_SPELLING] + dfas[1:], first, max_states, gates=2,
                                      unchecked=frozenset({1}))
        except _Conflict:
            continue
        if not inliner.markers:
            return ("dfa", product)
        return embed_with_calls(nfa, product, {b: fid for fid, b in inliner.markers.items()})
    raise NotBuildable(f"two branches both admit values of unbounded nesting (any JSON value or a recursive "
                       f"$ref) at one place, and unrolling them {MAX_UNROLL} levels does not tell them apart")


def embed_with_calls(nfa: ByteNFA, d: ByteDFA, call_of_marker: dict[int, int]) -> Node:
    """A new fragment of `nfa` running DFA `d`, each marker byte edge a call of its fragment."""
    fid = nfa.new_fragment()
    n = d.num_states
    base = nfa.new_states(n)
    for s, row in enumerate(d.edges):
        for mask, t in row:
            plain = mask & ~MARKER_MASK
            if plain:
                nfa.edges[base + s].append((plain, base + t))
                nfa.masks.add(plain)
            for b, callee in call_of_marker.items():
                if mask >> b & 1:
                    nfa.calls[base + s].append((callee, base + t))
    for s in d.accepting:
        nfa.eps[base + s].append(nfa.frag_end[fid])
    nfa.eps[nfa.frag_start[fid]].append(base + d.start)
    nfa.children[fid] = set(call_of_marker.values())
    return ("call", fid)
