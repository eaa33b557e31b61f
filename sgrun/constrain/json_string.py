"""JSON string literals as automata.

Unconstrained (or length-only) strings accept every escape JSON allows (\\" \\\\ \\/ \\b \\f \\n
\\r \\t and \\uHHHH, surrogate pairs counted as one character). Strings with a pattern, format
or excluded values are built as a DFA over the *decoded* UTF-8 text, then lifted to the escaped
form: raw characters plus the short escapes and \\u00XX escapes of ASCII code points (other
code points must appear raw, as json.dumps(ensure_ascii=False) writes them).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import lru_cache

from sgrun.constrain.byte_dfa import DEFAULT_MAX_DFA_STATES, ByteDFA, dfa_from_node, fully_live, product, trim
from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.byte_nfa import byte_mask
from sgrun.constrain.regex_ast import MAX_CODEPOINT, Node, alt, chars, lit, rep, seq

HEX = chars((0x30, 0x39), (0x41, 0x46), (0x61, 0x66))
_HEX_NOT_D = chars((0x30, 0x39), (0x41, 0x43), (0x45, 0x46), (0x61, 0x63), (0x65, 0x66))
_D = chars((0x44, 0x44), (0x64, 0x64))
RAW_CHAR = chars((0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CODEPOINT))
SHORT_ESCAPE = seq(lit("\\"), chars((0x22, 0x22), (0x2F, 0x2F), (0x5C, 0x5C), (0x62, 0x62), (0x66, 0x66),
                                    (0x6E, 0x6E), (0x72, 0x72), (0x74, 0x74)))
_U = lit("\\u")
# \uHHHH that is not a surrogate, or a high+low surrogate pair: each is one character.
U_ESCAPE = alt(seq(_U, _HEX_NOT_D, HEX, HEX, HEX),
               seq(_U, _D, chars((0x30, 0x37)), HEX, HEX),
               seq(_U, _D, chars((0x38, 0x39), (0x41, 0x42), (0x61, 0x62)), HEX, HEX,
                   _U, _D, chars((0x43, 0x46), (0x63, 0x66)), HEX, HEX))
CHAR_UNIT = alt(RAW_CHAR, SHORT_ESCAPE, U_ESCAPE)
QUOTE = lit('"')
ANY_CODEPOINT = chars((0, MAX_CODEPOINT))


def string_node(min_length: int = 0, max_length: int | None = None) -> Node:
    return seq(QUOTE, rep(CHAR_UNIT, min_length, max_length), QUOTE)


@lru_cache(maxsize=None)
def any_text_dfa() -> ByteDFA:
    return dfa_from_node(rep(ANY_CODEPOINT, 0, None))


def length_dfa(min_length: int, max_length: int | None) -> ByteDFA:
    return dfa_from_node(rep(ANY_CODEPOINT, min_length, max_length))


_CONTINUATION = byte_mask(0x80, 0xBF)  # UTF-8 continuation bytes: the same code point


def length_range(d: ByteDFA) -> tuple[int, int | None]:
    """Fewest and most code points of the strings a trimmed `d` accepts (None: no most, a
    cycle). Length bounds the range already meets need no counter."""
    lead = {s: [(t, bool(m & ~_CONTINUATION), bool(m & _CONTINUATION)) for m, t in d.edges[s]]
            for s in range(d.num_states)}
    # shortest: 0-1 BFS on (code points so far)
    best = {d.start: 0}
    todo = [d.start]
    while todo:
        nxt = []
        for s in todo:
            for t, counts, cont in lead[s]:
                w = best[s] + (0 if cont and not counts else 1)
                if w < best.get(t, 1 << 60):
                    best[t] = w
                    nxt.append(t)
        todo = nxt
    shortest = min((best[s] for s in d.accepting if s in best), default=0)
    # longest: DFS over the (trimmed, so co-reachable) graph; any cycle -> unbounded
    order, state, longest = [], {}, {}
    stack = [(d.start, 0)]
    while stack:
        s, i = stack.pop()
        if i == 0:
            if state.get(s) == 1:
                return shortest, None
            if state.get(s) == 2:
                continue
            state[s] = 1
        if i < len(lead[s]):
            stack.append((s, i + 1))
            t = lead[s][i][0]
            if state.get(t) == 1:
                return shortest, None
            if state.get(t) != 2:
                stack.append((t, 0))
        else:
            state[s] = 2
            order.append(s)
    for s in order:  # post-order: successors first
        far = 0 if s in d.accepting else -1
        for t, counts, cont in lead[s]:
            if longest.get(t, -1) >= 0:
                far = max(far, longest[t] + (1 if counts else 0))
        longest[s] = far
    return shortest, max(longest.get(d.start, 0), 0)


def length_product(d: ByteDFA, min_length: int, max_length: int | None,
                   max_states: int = DEFAULT_MAX_DFA_STATES) -> ByteDFA:
    """`d` (over decoded UTF-8 text) restricted to lo..hi code points, built over the pairs
    (state of d, code points so far) that inputs reach, instead of intersecting with
    length_dfa: a 4-state `format: uri` under maxLength 4096 is ~16k pairs, where the length
    DFA alone (every UTF-8 path at every count) would be ~80k states."""
    cap = max_length if max_length is not None else min_length  # without hi, counts saturate at lo
    index: dict[tuple[int, int], int] = {(d.start, 0): 0}
    pairs = [(d.start, 0)]
    edges: list[list[tuple[int, int]]] = []
    i = 0
    while i < len(pairs):
        s, n = pairs[i]
        i += 1
        tick(1)
        row = []
        for mask, t in d.edges[s]:
            for part, nn in ((mask & _CONTINUATION, n), (mask & ~_CONTINUATION, n + 1)):
                if not part:
                    continue
                if nn > cap:
                    if max_length is not None:
                        continue
                    nn = cap
                key = (t, nn)
                j = index.get(key)
                if j is None:
                    if len(pairs) >= max_states:
                        raise ConstraintTooComplexError(
                            f"the constraint is too complex: its automaton exceeds {max_states} DFA states; "
                            f"simplify it (fewer alternatives under repeats, smaller bounds)")
                    j = index[key] = len(pairs)
                    pairs.append(key)
                row.append((part, j))
        edges.append(row)
    accepting = {k for k, (s, n) in enumerate(pairs) if s in d.accepting and n >= min_length}
    return trim(ByteDFA(edges, accepting))


def excluded_dfa(base: ByteDFA, values: list[str]) -> ByteDFA:
    if not values:
        return base
    return product(base, dfa_from_node(alt(*(lit(v) for v in values))), "minus")


_SHORT = {0x22: 0x22, 0x5C: 0x5C, 0x2F: 0x2F, 0x62: 0x08, 0x66: 0x0C, 0x6E: 0x0A, 0x72: 0x0D, 0x74: 0x09}
_RAW_OK = byte_mask(0x20, 0xFF) & ~(1 << 0x22) & ~(1 << 0x5C)
_ASCII = (1 << 0x80) - 1
_HEX_DIGITS = "0123456789abcdef"
_HEX_BYTE = [1 << ord(c) | 1 << ord(c.upper()) for c in _HEX_DIGITS]  # escape digit(s) of each nibble value
_HEX_ANY = sum(_HEX_BYTE)
_CONT = byte_mask(0x80, 0xBF)  # UTF-8 continuation bytes
MAX_WIDE_KEYS = 8  # states with different non-ASCII edges whose \uXXXX escapes of non-ASCII are lifted


@lru_cache(maxsize=1 << 16)
def _hex_mask(nibbles: int) -> int:
    """Byte mask of the hex digits (either case) of the low nibble values set in `nibbles`."""
    out = 0
    for v in range(16):
        if nibbles >> v & 1:
            out |= _HEX_BYTE[v]
    return out


_LIFTED: "OrderedDict[tuple, ByteDFA]" = OrderedDict()
_LIFTED_MAX = 1024
_lifted_lock = threading.Lock()


def escape_lift(decoded: ByteDFA) -> ByteDFA:
    """escape_lift_uncached, remembered across compiles by the decoded DFA's structure: the same
    format, pattern or key set in another schema (or a recompile) costs a tuple of its edges,
    not the lift. The lifted DFA is only read afterwards (embedded, never changed)."""
    key = (decoded.start, tuple(sorted(decoded.accepting)), tuple(map(tuple, decoded.edges)))
    with _lifted_lock:
        got = _LIFTED.get(key)
        if got is not None:
            _LIFTED.move_to_end(key)
            return got
    got = _lift(decoded)
    with _lifted_lock:
        _LIFTED[key] = got
        while len(_LIFTED) > _LIFTED_MAX:
            _LIFTED.popitem(last=False)
    return got


def _lift(decoded: ByteDFA) -> ByteDFA:
    """escape_lift_uncached, in C++ where the constraint library builds (native/escape_lift.cpp: the same
    DFA, state for state; 0.6-0.8 ms against 3.4-4.5 ms for an 8-name key exclusion), else in Python."""
    from sgrun.constrain.native_dfa import native_enabled, native_escape_lift
    if not native_enabled():
        return escape_lift_uncached(decoded)
    got = native_escape_lift(decoded.edges, decoded.accepting, decoded.start)
    if got is None:
        return ByteDFA([[]], set())
    edges, accepting = got
    return fully_live(ByteDFA(edges, set(accepting)))  # (trimmed in C++)


def escape_lift_uncached(decoded: ByteDFA) -> ByteDFA:
    """DFA over the escaped JSON string body whose decoding is accepted by `decoded`.

    Raw bytes keep their edges; an escape (`\\n`, `\\u00XX`...) of an ASCII byte goes where that
    byte goes, and `\\uXXXX` of a non-ASCII BMP character where its UTF-8 bytes go (json.dumps'
    default writes them so; astral characters' surrogate pairs are not lifted). Worked on edge
    masks (never byte by byte), and the escape sub-automaton of a state is shared by every state
    with the same ASCII targets and non-ASCII edges (in a trie of excluded names or a pattern's
    DFA most states send all of ASCII to the same few states), as is each `\\u00X` row with the
    same targets, so the lift adds a few states, not ~12 per state."""
    n = decoded.num_states
    edges: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    esc_of: dict[tuple, int] = {}
    row_of: dict[tuple, int] = {}

    def new() -> int:
        edges.append([])
        return len(edges) - 1

    hexes = _HexLift(decoded, edges, new)
    for s in range(n):
        row = edges[s]
        ascii_targets = []
        wide = []
        for m, t in decoded.edges[s]:
            if m & _RAW_OK:
                row.append((m & _RAW_OK, t))
            if m & _ASCII:
                ascii_targets.append((m & _ASCII, t))
            if m >> 0x80:
                wide.append((m >> 0x80, t))
        if not ascii_targets and not wide:
            continue
        key = (tuple(ascii_targets), tuple(wide))
        esc = esc_of.get(key)
        if esc is None:
            esc = esc_of[key] = new()
            for a, t in ascii_targets:
                letters = 0
                for letter, b in _SHORT.items():
                    if a >> b & 1:
                        letters |= 1 << letter
                if letters:
                    edges[esc].append((letters, t))
            u, u0, u00 = new(), new(), new()
            edges[esc].append((1 << ord("u"), u))
            edges[u].append((1 << ord("0"), u0))
            edges[u0].append((1 << ord("0"), u00))
            digit_rows: dict[int, int] = {}  # row state -> mask of its first digits
            for h1 in range(8):
                hex_row = tuple((a >> (16 * h1) & 0xFFFF, t) for a, t in ascii_targets if a >> (16 * h1) & 0xFFFF)
                if not hex_row:
                    continue
                h = row_of.get(hex_row)
                if h is None:
                    h = row_of[hex_row] = new()
                    edges[h] = [(_hex_mask(nib), t) for nib, t in hex_row]
                digit_rows[h] = digit_rows.get(h, 0) | 1 << ord(str(h1))
            edges[u00].extend((m, h) for h, m in digit_rows.items())
            if wide:
                hexes.add_wide(s, tuple(wide), u, u0, u00)
        row.append((1 << 0x5C, esc))
    return trim(ByteDFA(edges, set(decoded.accepting), decoded.start))


class _HexLift:
    """The `\\uXXXX` digits of non-ASCII BMP characters, stepped through `decoded`'s UTF-8
    edges as the digits determine the bytes: 2-byte characters (U+0080-07FF, digits 0 h2 h3 h4:
    lead 0xC0 | h2 << 2 | h3 >> 2) and 3-byte ones (lead 0xE0 | h1, then 0x80 | h2 << 2 | h3 >> 2,
    then 0x80 | (h3 & 3) << 4 | h4). Each partial state (decoded state, pending low bits) is one
    lifted state, shared."""

    def __init__(self, decoded: ByteDFA, edges: list, new):
        self.step = decoded.step
        self.edges_of = decoded.edges
        self.edges = edges
        self.new = new
        self.memo: dict[tuple, int | None] = {}
        self.wide_edges: dict[tuple, tuple[list, list, list]] = {}

    def _state(self, key: tuple, targets: dict[int, int]) -> int | None:
        """A lifted state with edges digit-mask -> target, None if it has none."""
        if not targets:
            self.memo[key] = None
            return None
        st = self.new()
        self.edges[st] = [(m, t) for t, m in targets.items()]
        self.memo[key] = st
        return st

    def last(self, t: int, pend: int) -> int | None:
        """Waiting for the last digit h4: the byte 0x80 | pend << 4 | h4 from decoded state t."""
        key = ("last", t, pend)
        if key in self.memo:
            return self.memo[key]
        u = self.cont(t)
        if u is not None:  # every continuation byte goes to u: so does every digit
            return self._state(key, {u: _HEX_ANY})
        targets: dict[int, int] = {}
        for h4 in range(16):
            tt = self.step(t, 0x80 | pend << 4 | h4)
            if tt is not None:
                targets[tt] = targets.get(tt, 0) | _HEX_BYTE[h4]
        return self._state(key, targets)

    def cont(self, t: int) -> int | None:
        """The state every UTF-8 continuation byte (0x80-0xBF) leads to from t, if one edge
        takes them all (the common case: only E0 / ED / F0 / F4 leads restrict the next byte)."""
        key = ("cont", t)
        if key in self.memo:
            return self.memo[key]
        got = None
        for m, tt in self.edges_of[t]:
            if m & _CONT:
                got = tt if m & _CONT == _CONT else None
                break
        self.memo[key] = got
        return got

    def third(self, t1: int, h2: int) -> int | None:
        """3-byte character, lead byte read (decoded state t1) and h2: waiting for h3."""
        key = ("third", t1, h2)
        if key in self.memo:
            return self.memo[key]
        targets: dict[int, int] = {}
        u = self.cont(t1)
        for h3 in range(16):
            t2 = u if u is not None else self.step(t1, 0x80 | h2 << 2 | h3 >> 2)
            nxt = self.last(t2, h3 & 3) if t2 is not None else None
            if nxt is not None:
                targets[nxt] = targets.get(nxt, 0) | _HEX_BYTE[h3]
        return self._state(key, targets)

    def second(self, t1: int) -> int | None:
        key = ("second", t1)
        if key in self.memo:
            return self.memo[key]
        targets: dict[int, int] = {}
        for h2 in range(16):
            nxt = self.third(t1, h2)
            if nxt is not None:
                targets[nxt] = targets.get(nxt, 0) | _HEX_BYTE[h2]
        return self._state(key, targets)

    def two_byte(self, s: int, h2: int, h3s: range) -> dict[int, int]:
        """2-byte characters from decoded state s, digits 0 h2 h3 h4: h3 -> lifted state masks."""
        targets: dict[int, int] = {}
        for h3 in h3s:
            t1 = self.step(s, 0xC0 | h2 << 2 | h3 >> 2)
            nxt = self.last(t1, h3 & 3) if t1 is not None else None
            if nxt is not None:
                targets[nxt] = targets.get(nxt, 0) | _HEX_BYTE[h3]
        return targets

    def add_wide(self, s: int, wide: tuple, u: int, u0: int, u00: int) -> None:
        """Append s's non-ASCII digit edges to its u / u0 / u00 states. They depend only on s's
        non-ASCII edges (`wide`), so states sharing those (every state of a names trie) share
        one computation. Past MAX_WIDE_KEYS different ones the rest are left out: sound, and
        bounds the lift's cost (each key costs a few hundred steps of the decoded automaton)."""
        got = self.wide_edges.get(wide)
        if got is None:
            if len(self.wide_edges) >= MAX_WIDE_KEYS:
                return  # (a length product: one key per count) those states take raw UTF-8 only
            got = self.wide_edges[wide] = self._wide(s)
        for st, more in zip((u, u0, u00), got):
            self.edges[st].extend(more)

    def _wide(self, s: int) -> tuple[list, list, list]:
        eu: list = []
        eu0: list = []
        for h1 in range(1, 16):  # uh1..: 3 bytes, lead 0xE0 | h1
            t1 = self.step(s, 0xE0 | h1)
            nxt = self.second(t1) if t1 is not None else None
            if nxt is not None:
                eu.append((_HEX_BYTE[h1], nxt))
        for h2 in range(1, 16):  # u0h2..: 2 bytes below 0x800, 3 bytes (lead 0xE0) from 0x800
            if h2 < 8:
                nxt = self._state(("two", s, h2), self.two_byte(s, h2, range(16)))
            else:
                t1 = self.step(s, 0xE0)
                nxt = self.third(t1, h2) if t1 is not None else None
            if nxt is not None:
                eu0.append((_HEX_BYTE[h2], nxt))
        eu00 = [(m, nxt) for nxt, m in self.two_byte(s, 0, range(8, 16)).items()]  # u008X-u00FF
        return eu, eu0, eu00


def constrained_string_node(decoded: ByteDFA) -> Node:
    lifted = escape_lift(decoded)
    if not lifted.accepting:
        return ("alt", ())
    return seq(QUOTE, ("dfa", lifted), QUOTE)
