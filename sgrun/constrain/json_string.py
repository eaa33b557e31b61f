"""JSON string literals as automata.

Unconstrained (or length-only) strings accept every escape JSON allows (\\" \\\\ \\/ \\b \\f \\n
\\r \\t and \\uHHHH, surrogate pairs counted as one character). Strings with a pattern, format
or excluded values are built as a DFA over the *decoded* UTF-8 text, then lifted to the escaped
form: raw characters plus the short escapes and \\u00XX escapes of ASCII code points (other
code points must appear raw, as json.dumps(ensure_ascii=False) writes them).
"""

from __future__ import annotations

from functools import lru_cache

from sgrun.constrain.byte_dfa import ByteDFA, dfa_from_node, product, trim
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


def excluded_dfa(base: ByteDFA, values: list[str]) -> ByteDFA:
    if not values:
        return base
    return product(base, dfa_from_node(alt(*(lit(v) for v in values))), "minus")


_SHORT = {0x22: 0x22, 0x5C: 0x5C, 0x2F: 0x2F, 0x62: 0x08, 0x66: 0x0C, 0x6E: 0x0A, 0x72: 0x0D, 0x74: 0x09}
_RAW_OK = byte_mask(0x20, 0xFF) & ~(1 << 0x22) & ~(1 << 0x5C)
_HEX_DIGITS = "0123456789abcdef"


def escape_lift(decoded: ByteDFA) -> ByteDFA:
    """DFA over the escaped JSON string body whose decoding is accepted by `decoded`."""
    edges: list[list[tuple[int, int]]] = [[] for _ in range(decoded.num_states)]

    def new() -> int:
        edges.append([])
        return len(edges) - 1

    def add(s: int, byte: int, t: int) -> None:
        edges[s].append((1 << byte, t))

    for s in range(decoded.num_states):
        row = []
        for m, t in decoded.edges[s]:
            if m & _RAW_OK:
                row.append((m & _RAW_OK, t))
        edges[s] = row
        targets = {b: decoded.step(s, b) for b in range(0x80)}
        if not any(t is not None for t in targets.values()):
            continue
        esc = new()
        add(s, 0x5C, esc)
        for letter, b in _SHORT.items():
            if targets[b] is not None:
                add(esc, letter, targets[b])
        u = new()
        add(esc, ord("u"), u)
        u0 = new()
        add(u, ord("0"), u0)
        u00 = new()
        add(u0, ord("0"), u00)
        for h1 in range(8):
            if not any(targets[h1 * 16 + h2] is not None for h2 in range(16)):
                continue
            h = new()
            add(u00, ord(str(h1)), h)
            for h2 in range(16):
                t = targets[h1 * 16 + h2]
                if t is not None:
                    ch = _HEX_DIGITS[h2]
                    add(h, ord(ch), t)
                    if ch.isalpha():
                        add(h, ord(ch.upper()), t)
    return trim(ByteDFA(edges, set(decoded.accepting), decoded.start))


def constrained_string_node(decoded: ByteDFA) -> Node:
    lifted = escape_lift(decoded)
    if not lifted.accepting:
        return ("alt", ())
    return seq(QUOTE, ("dfa", lifted), QUOTE)


def json_string_literal(value: str) -> str:
    import json
    return json.dumps(value, ensure_ascii=False)
