"""Triggered constraints: free text until a trigger string appears, then held to that trigger's
constraint (the idea of SGLang's structural tags / xgrammar's triggered tags).

The whole thing is one automaton, so token masks stay exact at every step, including a token that
straddles the trigger: the free part is "bytes in which no trigger occurs" (an Aho-Corasick
automaton over the triggers), and reaching the end of trigger i leaves the free part and enters
constraint i. After the constraint's language ends, so does the output (EOS only): a constraint
that wants more free text afterwards says so itself.
"""

from __future__ import annotations

from collections import deque

from sgrun.constrain.byte_dfa import ByteDFA
from sgrun.constrain.errors import InvalidSchemaError
from sgrun.constrain.regex_ast import NOTHING, Node, alt, chars, lit, opt, rep, seq


def _goto_table(triggers: list[bytes]) -> tuple[list[list[int]], list[int | None]]:
    """Aho-Corasick over bytes: delta[state][byte] and, per state, the first trigger (in list order)
    that ends there (None for states that end no trigger)."""
    children: list[dict[int, int]] = [{}]
    ends: list[int | None] = [None]
    for i, t in enumerate(triggers):
        s = 0
        for b in t:
            if b not in children[s]:
                children.append({})
                ends.append(None)
                children[s][b] = len(children) - 1
            s = children[s][b]
        if ends[s] is None:
            ends[s] = i
    n = len(children)
    delta = [[0] * 256 for _ in range(n)]
    fail = [0] * n
    for b, c in children[0].items():
        delta[0][b] = c
    queue = deque(children[0].values())
    while queue:
        s = queue.popleft()
        if ends[s] is None and ends[fail[s]] is not None:
            ends[s] = ends[fail[s]]  # a shorter trigger ends here as a suffix
        for b in range(256):
            c = children[s].get(b)
            if c is None:
                delta[s][b] = delta[fail[s]][b]
            else:
                fail[c] = delta[fail[s]][b]
                delta[s][b] = c
                queue.append(c)
    return delta, ends


def _edges(row: list[int], keep: dict[int, int]) -> list[tuple[int, int]]:
    """Group a 256-entry goto row into (byte mask, target) edges, mapping targets through `keep`
    (targets missing from `keep` are dropped)."""
    by_target: dict[int, int] = {}
    for b, t in enumerate(row):
        if t in keep:
            by_target[keep[t]] = by_target.get(keep[t], 0) | (1 << b)
    return [(m, t) for t, m in by_target.items()]


def trigger_dfas(triggers: list[str]) -> tuple[ByteDFA, list[ByteDFA]]:
    """(free, found): `free` accepts byte strings containing no trigger; `found[i]` accepts those
    whose first trigger occurrence is trigger i and ends at the last byte."""
    raw = [t.encode("utf-8") for t in triggers]
    if not raw or any(not t for t in raw):
        raise InvalidSchemaError("every trigger must be a non-empty string")
    delta, ends = _goto_table(raw)
    live = [s for s in range(len(delta)) if ends[s] is None]
    index = {s: i for i, s in enumerate(live)}
    free = ByteDFA([_edges(delta[s], index) for s in live], set(range(len(live))), 0)
    found = []
    for i in range(len(raw)):
        sink = len(live)
        keep = dict(index)
        keep.update({s: sink for s in range(len(delta)) if ends[s] == i})
        edges = [_edges(delta[s], keep) for s in live] + [[]]
        found.append(ByteDFA(edges, {sink}, 0))
    return free, found


def _not_starting_with(trigger: bytes) -> ByteDFA:
    """Byte strings that do not start with `trigger` (the empty string included)."""
    n = len(trigger)
    any_byte = (1 << 256) - 1
    # States 0..n-1: matched trigger[:i] so far; n: diverged (anything goes).
    edges: list[list[tuple[int, int]]] = []
    for i in range(n):
        row = [(any_byte & ~(1 << trigger[i]), n)]
        if i + 1 < n:
            row.append((1 << trigger[i], i + 1))
        edges.append(row)
    edges.append([(any_byte, n)])
    return ByteDFA(edges, set(range(n + 1)), 0)


def triggered_node(branches: list[tuple[str, Node]], free_may_end: bool = True, anchored: bool = False) -> Node:
    """Free text, where trigger i (when it appears) is followed by node i.

    free_may_end: the output may end in free text without any trigger.
    anchored: a trigger counts only at the very start of the output (the rest is plain text)."""
    if anchored:
        parts = [seq(lit(t), node) for t, node in branches]
        if free_may_end:
            free_text: Node = ("dfa", _not_starting_with(branches[0][0].encode("utf-8")))
            if len(branches) > 1:
                raise InvalidSchemaError("an anchored trigger set holds one trigger")
            parts.append(free_text)
        return alt(*parts) if parts else NOTHING
    free, found = trigger_dfas([t for t, _ in branches])
    parts = [seq(("dfa", f), node) for f, (_, node) in zip(found, branches)]
    if free_may_end:
        parts.append(("dfa", free))
    return alt(*parts)


def after_reasoning(node: Node, open_tag: str, close_tag: str) -> Node:
    """`node`, optionally preceded by a reasoning section: `open_tag`, free text without
    `close_tag`, `close_tag`, and the newlines/spaces models put before their answer. An empty
    `open_tag` means the chat template already opened the section in the prompt: the output
    starts inside it and must close it before `node`."""
    _, (found,) = trigger_dfas([close_tag])
    gap = rep(chars((0x09, 0x0A), (0x0D, 0x0D), (0x20, 0x20)), 0, None)
    if not open_tag:
        return seq(("dfa", found), gap, node)
    return alt(node, seq(lit(open_tag), ("dfa", found), gap, node))
