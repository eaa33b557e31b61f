"""The small regular-expression AST every constraint compiles to before becoming an automaton.

Nodes are tuples so they hash and compare structurally:
  ("chars", ((lo, hi), ...))   one code point from the ranges (emitted as UTF-8)
  ("bytes", b"...")            a literal byte string
  ("byteset", mask)            one byte b with bit b of the int `mask` set
  ("seq", (node, ...))         concatenation
  ("alt", (node, ...))         alternation; ("alt", ()) is the empty language
  ("rep", node, min, max)      repetition; max None = unbounded
  ("call", fragment_id)        a sub-automaton (recursion-capable, see byte_nfa)
  ("dfa", ByteDFA)             an eagerly built DFA embedded as is
"""

from __future__ import annotations

from typing import Any

Node = tuple[Any, ...]

EMPTY: Node = ("seq", ())
NOTHING: Node = ("alt", ())
MAX_CODEPOINT = 0x10FFFF


def chars(*ranges: tuple[int, int]) -> Node:
    return ("chars", normalize_ranges(ranges))


def lit(text: str | bytes) -> Node:
    return ("bytes", text.encode("utf-8") if isinstance(text, str) else text)


def seq(*nodes: Node) -> Node:
    flat: list[Node] = []
    for n in nodes:
        if n == NOTHING:
            return NOTHING
        if n[0] == "seq":
            flat.extend(n[1])
        else:
            flat.append(n)
    # Merge adjacent literals: fewer NFA states, same language.
    merged: list[Node] = []
    for n in flat:
        if merged and n[0] == "bytes" and merged[-1][0] == "bytes":
            merged[-1] = ("bytes", merged[-1][1] + n[1])
        else:
            merged.append(n)
    return merged[0] if len(merged) == 1 else ("seq", tuple(merged))


def alt(*nodes: Node) -> Node:
    flat: dict[Node, None] = {}  # ordered, deduplicated in linear time
    for n in nodes:
        parts = n[1] if n[0] == "alt" else (n,)
        for p in parts:
            flat[p] = None
    if len(flat) == 1:
        return next(iter(flat))
    return ("alt", tuple(flat))


def rep(node: Node, lo: int, hi: int | None) -> Node:
    if hi is not None and hi < lo:
        return NOTHING
    if hi == 0:
        return EMPTY
    if lo == 1 and hi == 1:
        return node
    return ("rep", node, lo, hi)


def opt(node: Node) -> Node:
    return rep(node, 0, 1)


def normalize_ranges(ranges: Any) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def negate_ranges(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    out, nxt = [], 0
    for lo, hi in normalize_ranges(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return tuple(out)


def literal_choices(strings: list[str]) -> Node:
    return alt(*(lit(s) for s in strings)) if strings else NOTHING
