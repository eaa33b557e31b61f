"""The byte NFA as a flat program: the node tree serialized in one pass, built into states later.

ProgramNFA has ByteNFA's construction interface (new_fragment, define_fragment, shared,
longest_call_chain, fully_live, trim, all_masks), but define_fragment records its node as
integer opcodes instead of building states: one visit per distinct node object (memoized by
identity, so a sub-tree the compiler shares, a member separator built in every lane of an
object, a repeat's unrolled body, is written once) instead of one Python call per NFA state.
The program is then built into the NFA's arrays by `constrain/native/nfa_build.cpp` and handed
to the C++ lazy DFA without ever being Python lists; `build_lists` replays the same program in
Python into ByteNFA's lists, the reference the tests compare the C++ build with (state for
state: both allocate in the same order) and the fallback where the C++ does not build.

Why: building the NFA in Python was ~37% of a JSON Schema's compile (cProfile over the
real-world-like corpus, docs/benchmarks-constrain.md), a Python call and three list appends per
state; the C++ build of the same program costs microseconds.

State numbering: during construction only fragments allocate states (fragment f's start is
2f, its end 2f + 1); the builder then allocates the bodies in definition order. Fragments are
defined in post-order (a shared fragment met inside a definition completes first).

Where the compiler needs the built graph during construction (exactly_one's product fragments
with calls write states directly, its first-byte analysis reads edges) a ProgramNFA raises
NeedsListNFA and the caller compiles on the list-built ByteNFA instead (schema_to_nfa).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sgrun.constrain.byte_nfa import ByteNFA, _SHARE_DFAS_OVER, _SHARE_REPEATS_OVER, byte_mask
from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.regex_ast import Node
from sgrun.constrain.utf8_ranges import utf8_sequences

# opcodes (nfa_build.cpp reads the same numbers)
OP_BYTES, OP_BYTESET, OP_CHARS, OP_SEQ, OP_ALT, OP_REP, OP_CALL, OP_CCALL, OP_DFA, OP_MEMBERS, OP_TABLE = range(1, 12)
DEF_NODE, DEF_DFA = 0, 1  # a fragment defined from a node, or as one embedded DFA (a shared big leaf)
MAX_EDGES = 16_000_000  # byte, epsilon and call edges together: a hostile program stops here


_SINGLE_WORDS = b"".join((1 << b).to_bytes(32, "little") for b in range(256))  # mask ids 0..255


class NeedsListNFA(Exception):
    """The compiler reached for the built graph during construction; compile on a ByteNFA."""


class ProgramNFA(ByteNFA):
    """A shared ByteNFA (share=True semantics) recorded as a program; see the module docstring."""

    def __init__(self, max_states: int = 400_000, builder: Any = None):
        self.max_states = max_states
        # builder(self) -> the C++ build (native_nfa.NativeNFA; passed in by native_nfa.new_program_nfa,
        # so this module needs no C++), or None: the Python replay serves
        self.builder = builder
        self.share = True
        self.frag_start: list[int] = []
        self.frag_end: list[int] = []
        self.end_of: dict[int, int] = {}
        self.children: dict[int, set[int]] = {}
        self.frag_node: dict[int, Node] = {}
        self.masks: set[int] = set()  # every edge mask but single bytes (those: _lit)
        self._lit: set[int] = set()  # bytes read by literal edges
        self._chars_cache: dict[Any, list] = {}
        self._shared: dict[Node, int] = {}
        self._defining: list[set[int]] = []
        self._code: list[int] = []
        self._pool = bytearray()
        self._mask_id: dict[int, int] = {}  # mask -> id (ids 0..255: the single bytes)
        self._memo: dict[int, int] = {}  # id(node) -> its offset in _code
        self._called: dict[int, frozenset] = {}  # offset -> fragments the node calls (only non-empty)
        self._tables: dict[int, int] = {}  # id(ByteDFA) -> its OP_TABLE offset
        self._keep: list[Any] = []  # keeps memoized DFAs alive while their id is a key
        self.defs: list[int] = []  # (fid, DEF_NODE | DEF_DFA, offset) triples
        self._ticked = 0
        self.needs_trim = False  # trim found a fragment part that cannot complete: the build prunes
        self._built: Any = None  # the C++ NFA (native_nfa.NativeNFA) of the program as it is now
        # set when the compiler is done: from then on a reader of edges/eps/calls gets the Python
        # build (tests, the Python reference paths); before, it gets NeedsListNFA
        self.sealed = False

    def __getstate__(self) -> dict:
        # (a compile worker's NFA travels as its program; identity-keyed memos mean nothing in
        # another process, and the node trees are construction-only: ~70% of a pickle)
        state = self.__dict__.copy()
        state.update(_shared={}, _chars_cache={}, frag_node={}, _defining=[], _memo={}, _called={}, _tables={},
                     _keep=[], _built=None)
        return state

    def __getattr__(self, name: str) -> Any:
        if name in ("edges", "eps", "calls"):
            if not self.__dict__.get("sealed"):
                raise NeedsListNFA(name)
            self.as_lists()  # (a reader of the lists after construction: the Python build serves it)
            return self.__dict__[name]
        raise AttributeError(name)

    @property
    def is_lists(self) -> bool:
        return "edges" in self.__dict__

    # --- construction ---------------------------------------------------------------------
    def new_state(self) -> int:
        if self.is_lists:
            return ByteNFA.new_state(self)
        raise NeedsListNFA("new_state")

    def new_states(self, n: int) -> int:
        if self.is_lists:
            return ByteNFA.new_states(self, n)
        raise NeedsListNFA("new_states")

    def new_fragment(self) -> int:
        if self.is_lists:  # (built already: grows as a ByteNFA from here on)
            return ByteNFA.new_fragment(self)
        fid = len(self.frag_start)
        if 2 * fid + 2 > self.max_states:
            raise ConstraintTooComplexError(
                f"the constraint is too complex: its automaton exceeds {self.max_states} NFA states; reduce repeat "
                f"counts, string length bounds or schema size")
        tick(2)
        self.frag_start.append(2 * fid)
        self.frag_end.append(2 * fid + 1)
        self.end_of[2 * fid + 1] = fid
        self._built = None
        return fid

    def define_fragment(self, fid: int, node: Node) -> None:
        if self.is_lists:
            return ByteNFA.define_fragment(self, fid, node)
        self._defining.append(set())
        try:
            off = self._emit(node)
        finally:
            called = self._defining.pop()
        called.update(self._called.get(off, ()))
        tick(len(self._code) - self._ticked >> 2)  # (the compile budget: about one tick a node written)
        self._ticked = len(self._code)
        self.children[fid] = called
        self.frag_node[fid] = node
        self.defs += (fid, DEF_NODE, off)
        self._built = None

    def shared(self, node: Node) -> Node:
        fid = self._shared.get(node)
        if fid is None:
            if node[0] != "dfa" or self.is_lists:
                return super().shared(node)
            fid = self.new_fragment()
            self._shared[node] = fid
            self.children[fid] = set()
            self.frag_node[fid] = node
            self.defs += (fid, DEF_DFA, self._table(node[1]))
        return ("call", fid)

    def build(self, node: Node, cur: int) -> int:
        if self.is_lists:
            return ByteNFA.build(self, node, cur)
        raise NeedsListNFA("build")

    def _mid(self, mask: int) -> int:
        got = self._mask_id.get(mask)
        if got is None:
            if mask & (mask - 1) == 0:
                got = mask.bit_length() - 1
                self._lit.add(got)
            else:
                got = 256 + len(self.masks)
                self.masks.add(mask)
            self._mask_id[mask] = got
        return got

    def _table(self, dfa: Any) -> int:
        """Write a DFA as an OP_TABLE: its masks as this NFA's ids, then the rest, which reads
        the masks by their index in the DFA's own list and so is kept on the DFA and copied
        as is when a later compile embeds the same DFA (format and leaf DFAs are cached)."""
        got = self._tables.get(id(dfa))
        if got is not None:
            return got
        self._keep.append(dfa)
        masks, body = _table_body(dfa)
        code, mid = self._code, self._mid
        off = len(code)
        code += (OP_TABLE, dfa.num_states, dfa.start, len(masks))
        code += [mid(m) for m in masks]
        code += body
        tick(dfa.num_states)
        self._tables[id(dfa)] = off
        return off

    def _emit(self, node: Node) -> int:
        """Write `node` (children first) and return its offset; a node object already written
        is not written again."""
        got = self._memo.get(id(node))
        if got is not None:
            return got
        code = self._code
        kind = node[0]
        called: Any = None
        if kind == "bytes":
            data = node[1]
            self._lit.update(data)
            off = len(code)
            code += (OP_BYTES, len(self._pool), len(data))
            self._pool += data
        elif kind == "byteset":
            off = len(code)
            code += (OP_BYTESET, self._mid(node[1]) if node[1] else -1)
        elif kind == "chars":
            seqs = self._char_seqs(node[1])
            single, multi = 0, []
            for s in seqs:
                if len(s) == 1:
                    single |= byte_mask(*s[0])
                else:
                    multi.append(s)
            off = len(code)
            code += (OP_CHARS, self._mid(single) if single else -1, len(multi))
            for s in multi:
                code.append(len(s))
                code += [self._mid(byte_mask(lo, hi)) for lo, hi in s]
        elif kind == "seq" or kind == "alt":
            kids = [self._emit(c) for c in node[1]]
            called = self._union(kids)
            off = len(code)
            code += (OP_SEQ if kind == "seq" else OP_ALT, len(kids))
            code += kids
        elif kind == "rep":
            _, child, lo, hi = node
            if (hi if hi is not None else lo) > _SHARE_REPEATS_OVER:
                fid = child[1] if child[0] == "call" else self.shared(child)[1]
                called = frozenset((fid,))
                off = len(code)
                code += (OP_CCALL, fid, lo, -1 if hi is None else hi)
            else:
                c = self._emit(child)
                called = self._called.get(c)
                off = len(code)
                code += (OP_REP, c, lo, -1 if hi is None else hi)
        elif kind == "call":
            called = frozenset((node[1],))
            off = len(code)
            code += (OP_CALL, node[1])
        elif kind == "dfa":
            if node[1].num_states > _SHARE_DFAS_OVER:
                fid = self.shared(node)[1]
                called = frozenset((fid,))
                off = len(code)
                code += (OP_CALL, fid)
            else:
                t = self._table(node[1])
                off = len(code)
                code += (OP_DFA, t)
        elif kind == "members":
            _, members, extra, sep = node[:4]
            lo, hi = node[4] if len(node) > 4 else (0, None)
            kids = [self._emit(m) for m, _ in members]
            x = -1 if extra is None else self._emit(extra)
            sp = self._emit(sep)
            called = self._union(kids + ([x] if x >= 0 else []) + [sp])
            off = len(code)
            code += (OP_MEMBERS, len(kids), x, sp, lo, -1 if hi is None else hi)
            for k, (_, req) in zip(kids, members):
                code += (k, 1 if req else 0)
        else:
            raise AssertionError(f"unknown regex node {kind!r}")
        if called:
            self._called[off] = called
        self._memo[id(node)] = off
        return off

    def _union(self, offsets: list[int]) -> frozenset | None:
        got = None
        called = self._called
        for o in offsets:
            c = called.get(o)
            if c:
                got = c if got is None else got | c
        return got

    # --- the program, and its builds ------------------------------------------------------
    def _char_seqs(self, ranges: tuple[tuple[int, int], ...]) -> list[list[tuple[int, int]]]:
        seqs = self._chars_cache.get(ranges)
        if seqs is None:  # (ByteNFA's records its masks here; this one as the program uses them)
            seqs = self._chars_cache[ranges] = [s for lo, hi in ranges for s in utf8_sequences(lo, hi)]
        if self.is_lists:
            self.masks.update(byte_mask(lo, hi) for sq in seqs for lo, hi in sq)
        return seqs

    def all_masks(self) -> set[int]:
        return self.masks | {1 << b for b in self._lit}

    def program(self) -> dict[str, np.ndarray]:
        """The flat buffers the builders read: code (int32), pool (the literals' bytes), mask
        words ([ids, 4] uint64; ids 0..255 the single bytes), defs ((fid, kind, offset) triples)."""
        others = sorted((k, m) for m, k in self._mask_id.items() if k >= 256)
        words = np.frombuffer(_SINGLE_WORDS + b"".join(m.to_bytes(32, "little") for _, m in others),
                              dtype=np.uint64).reshape(-1, 4)
        return {"code": np.array(self._code, dtype=np.int32), "pool": np.frombuffer(bytes(self._pool), dtype=np.uint8),
                "words": words, "defs": np.array(self.defs, dtype=np.int32)}

    def trim(self) -> set[int]:
        """ByteNFA.trim: decided on the nodes where it can be; else the build prunes (the C++
        one, or the list build's graph pass) and this returns the non-empty fragments."""
        if self.is_lists:
            return ByteNFA.trim(self)
        if self.builder is not None:
            # In C++ the graph pass costs less than fully_live's Python walk of the nodes, and
            # where every node is live it prunes nothing (each construction makes only states on
            # a path from its entry to its exit), so it always runs there.
            if not self.needs_trim:
                self.needs_trim, self._built = True, None
            return self.native().nonempty()
        if self.fully_live():
            return set(range(len(self.frag_start)))
        self.needs_trim, self._built = True, None
        self.build_lists()
        return ByteNFA.trim(self)

    def native(self):
        """The program built in C++ (pruned if trim asked), kept until the program grows."""
        if self._built is None:
            if self.builder is None:
                raise RuntimeError("this program NFA has no C++ builder")
            self._built = self.builder(self)
        return self._built

    def as_lists(self) -> ProgramNFA:
        """This NFA as ByteNFA's lists, pruned where trim asked (what LazyDFA reads)."""
        if not self.is_lists:
            self.build_lists()
            if self.needs_trim:
                ByteNFA.trim(self)
        return self

    def build_lists(self) -> None:
        """Replay the program in Python into ByteNFA's lists (the reference build); the NFA is
        then a plain ByteNFA (trim, if asked, is the caller's: ByteNFA.trim)."""
        if self.is_lists:
            return
        _ListBuilder(self).run()
        self.__dict__.setdefault("_defining", [])


def _table_body(dfa: Any) -> tuple[list[int], list[int]]:
    """(the DFA's distinct masks, [accepting count, accepting states..., then per state: edge
    count, (mask index, target)...]), computed once per DFA object."""
    got = dfa.__dict__.get("_program_table")
    if got is None:
        index: dict[int, int] = {}
        accepting = list(dfa.accepting)
        body = [len(accepting)] + accepting
        for row in dfa.edges:
            body.append(len(row))
            for mask, t in row:
                k = index.get(mask)
                if k is None:
                    k = index[mask] = len(index)
                body += (k, t)
        got = dfa.__dict__["_program_table"] = (list(index), body)
    return got


class _ListBuilder:
    """nfa_build.cpp's build, in Python: the same order of states and edges."""

    def __init__(self, nfa: ProgramNFA):
        self.nfa = nfa
        self.code = nfa._code
        self.pool = bytes(nfa._pool)
        self.mask_of = {k: m for m, k in nfa._mask_id.items()}
        n = 2 * len(nfa.frag_start)
        self.edges: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.eps: list[list[int]] = [[] for _ in range(n)]
        self.calls: list[list[tuple]] = [[] for _ in range(n)]

    def mask(self, k: int) -> int:
        return 1 << k if k < 256 else self.mask_of[k]

    def new_states(self, n: int) -> int:
        first = len(self.edges)
        if first + n > self.nfa.max_states:
            raise ConstraintTooComplexError(
                f"the constraint is too complex: its automaton exceeds {self.nfa.max_states} NFA states; reduce "
                f"repeat counts, string length bounds or schema size")
        tick(n)
        self.edges.extend([] for _ in range(n))
        self.eps.extend([] for _ in range(n))
        self.calls.extend([] for _ in range(n))
        return first

    def run(self) -> None:
        nfa, defs = self.nfa, self.nfa.defs
        for i in range(0, len(defs), 3):
            fid, kind, off = defs[i: i + 3]
            start = nfa.frag_start[fid]
            end = self.build(off, start) if kind == DEF_NODE else self.table(off, start)
            self.eps[end].append(nfa.frag_end[fid])
        nfa.edges, nfa.eps, nfa.calls = self.edges, self.eps, self.calls
        nfa.masks = nfa.all_masks()

    def table(self, off: int, cur: int) -> int:
        c = self.code
        n, start, nmasks = c[off + 1: off + 4]
        local = [self.mask(k) for k in c[off + 4: off + 4 + nmasks]]
        nacc = c[off + 4 + nmasks]
        acc_at = off + 5 + nmasks
        base = self.new_states(n + 1)
        end = base + n
        at = acc_at + nacc
        for s in range(n):
            k = c[at]
            at += 1
            self.edges[base + s] = [(local[c[at + 2 * j]], base + c[at + 2 * j + 1]) for j in range(k)]
            at += 2 * k
        for s in c[acc_at: acc_at + nacc]:
            self.eps[base + s].append(end)
        self.eps[cur].append(base + start)
        return end

    def build(self, off: int, cur: int) -> int:
        c = self.code
        op = c[off]
        if op == OP_BYTES:
            at, n = c[off + 1], c[off + 2]
            if not n:
                return cur
            data = self.pool[at: at + n]
            first = self.new_states(n)
            self.edges[cur].append((1 << data[0], first))
            for k in range(1, n):
                self.edges[first + k - 1].append((1 << data[k], first + k))
            return first + n - 1
        if op == OP_BYTESET:
            nxt = self.new_states(1)
            if c[off + 1] >= 0:
                self.edges[cur].append((self.mask(c[off + 1]), nxt))
            return nxt
        if op == OP_CHARS:
            single, nmulti = c[off + 1], c[off + 2]
            end = self.new_states(1)
            at = off + 3
            for _ in range(nmulti):
                k = c[at]
                st = cur
                for i in range(k):
                    nxt = end if i == k - 1 else self.new_states(1)
                    self.edges[st].append((self.mask(c[at + 1 + i]), nxt))
                    st = nxt
                at += 1 + k
            if single >= 0:
                self.edges[cur].append((self.mask(single), end))
            return end
        if op == OP_SEQ:
            for k in c[off + 2: off + 2 + c[off + 1]]:
                cur = self.build(k, cur)
            return cur
        if op == OP_ALT:
            end = self.new_states(1)
            for k in c[off + 2: off + 2 + c[off + 1]]:
                entry = self.new_states(1)
                self.eps[cur].append(entry)
                self.eps[self.build(k, entry)].append(end)
            return end
        if op == OP_REP:
            child, lo, hi = c[off + 1: off + 4]
            for _ in range(lo):
                cur = self.build(child, cur)
            if hi < 0:
                loop = self.new_states(1)
                self.eps[cur].append(loop)
                self.eps[self.build(child, loop)].append(loop)
                out = self.new_states(1)
                self.eps[loop].append(out)
                return out
            end = self.new_states(1)
            for _ in range(hi - lo):
                self.eps[cur].append(end)
                cur = self.build(child, cur)
            self.eps[cur].append(end)
            return end
        if op == OP_CALL:
            nxt = self.new_states(1)
            self.calls[cur].append((c[off + 1], nxt))
            return nxt
        if op == OP_CCALL:
            fid, lo, hi = c[off + 1: off + 4]
            nxt = self.new_states(1)
            self.calls[cur].append((fid, nxt, lo, None if hi < 0 else hi))
            return nxt
        if op == OP_DFA:
            return self.table(c[off + 1], cur)
        if op == OP_MEMBERS:
            return self.members(off, cur)
        raise AssertionError(f"bad opcode {op} at {off}")

    def members(self, off: int, cur: int) -> int:
        """byte_nfa.ByteNFA._build_members over the program's operands."""
        c = self.code
        n, extra, sep, lo, hi = c[off + 1: off + 6]
        hi = None if hi < 0 else hi
        members = [(c[off + 6 + 2 * i], c[off + 7 + 2 * i]) for i in range(n)]
        top = hi if hi is not None else max(lo, 1)
        eps = self.eps

        def bump(k: int) -> int | None:
            if hi is None:
                return min(k + 1, top)
            return k + 1 if k < hi else None

        lanes = [cur] + [self.new_states(1) for _ in range(top)]
        for member, required in members:
            new = [self.new_states(1) for _ in range(top + 1)]
            for k in range(top + 1):
                if not required:
                    eps[lanes[k]].append(new[k])
                nk = bump(k)
                if nk is not None:
                    start = lanes[k] if k == 0 else self.build(sep, lanes[k])
                    eps[self.build(member, start)].append(new[nk])
            lanes = new
        end = self.new_states(1)
        for k in range(lo, top + 1):
            eps[lanes[k]].append(end)
        if extra >= 0:
            for k in range(top + 1):
                e_top = (hi - k) if hi is not None else 1
                if e_top < 1:
                    continue
                loop = [self.new_states(1) for _ in range(e_top + 1)]
                start = lanes[k] if k == 0 else self.build(sep, lanes[k])
                eps[self.build(extra, start)].append(loop[1])
                for e in range(1, e_top + 1):
                    if hi is None:
                        eps[self.build(extra, self.build(sep, loop[e]))].append(loop[e])
                    elif e < e_top:
                        eps[self.build(extra, self.build(sep, loop[e]))].append(loop[e + 1])
                    if min(k + 1, top if hi is None else hi) >= lo:
                        eps[loop[e]].append(end)
        return end
