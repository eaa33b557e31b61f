"""Liveness of a ByteNFA's fragments: whether every node's language is non-empty, evaluated
fragment by fragment with recursion resolved over rounds (ByteNFA.fully_live drives the rounds),
and whether every state of an embedded DFA reaches acceptance. Its own room so the NFA builder
stays one idea; it reads the NFA (its fragments and character sequences) and imports nothing of it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sgrun.constrain.regex_ast import Node

if TYPE_CHECKING:
    from sgrun.constrain.byte_nfa import ByteNFA


class LivenessWalk:
    """One round of ByteNFA.fully_live: non-emptiness of every node (memoised by identity: the
    compilers share node objects), fragments evaluated on first call; a call into a fragment
    still being evaluated (recursion) reads the previous round's value and marks the round
    stale, so another round follows unless nothing changed."""

    def __init__(self, nfa: "ByteNFA", previous: dict[int, bool]):
        self.nfa = nfa
        self.previous = previous
        self.done: dict[int, bool] = {}
        self.active: set[int] = set()
        self.memo: dict[int, bool] = {}
        self.stale = False
        self.dirty = False  # some sub-node has an empty language

    def fragment(self, f: int) -> bool:
        got = self.done.get(f)
        if got is not None:
            return got
        if f in self.active:
            self.stale = True
            return self.previous.get(f, False)
        self.active.add(f)
        got = self.done[f] = self.node(self.nfa.frag_node[f])
        self.active.discard(f)
        return got

    def node(self, node: Node) -> bool:
        key = id(node)
        got = self.memo.get(key)
        if got is not None:
            return got
        kind = node[0]
        if kind == "bytes":
            got = True
        elif kind == "byteset":
            got = node[1] != 0
        elif kind == "chars":
            got = bool(self.nfa._char_seqs(node[1]))
        elif kind == "seq":
            got = all([self.node(c) for c in node[1]])
        elif kind == "alt":
            got = any([self.node(c) for c in node[1]])
        elif kind == "rep":
            got = (self.node(node[1]) or node[2] == 0) and (node[3] is None or node[3] >= node[2])
        elif kind == "call":
            got = self.fragment(node[1])
        elif kind == "dfa":
            got = dfa_fully_live(node[1])
        elif kind == "members":
            _, members, extra, sep = node[:4]
            ne = [self.node(m) for m, _ in members]
            got = self.node(sep) and all(v for v, (_, required) in zip(ne, members) if required)
            if extra is not None:
                self.node(extra)
            if len(node) > 4 and tuple(node[4]) != (0, None):
                self.dirty = True  # counted members: lanes below the minimum may be dead; the graph pass decides
        else:
            got = False
        if not got:
            self.dirty = True
        self.memo[key] = got
        return got


def dfa_fully_live(dfa: Any) -> bool:
    """Every state of an embedded DFA reaches acceptance (cached on the DFA object)."""
    got = dfa.__dict__.get("_fully_live")
    if got is None:
        rev: list[list[int]] = [[] for _ in range(dfa.num_states)]
        for s, row in enumerate(dfa.edges):
            for _, t in row:
                rev[t].append(s)
        live = set(dfa.accepting)
        todo = list(live)
        while todo:
            for p in rev[todo.pop()]:
                if p not in live:
                    live.add(p)
                    todo.append(p)
        got = dfa.__dict__["_fully_live"] = len(live) == dfa.num_states
    return got
