"""Refusing Lark grammars whose longest-match lexer could strand a request.

Under the greedy (longest-match) lexer a token ends only where the next byte cannot extend it.
If terminal Y can follow terminal X but some text of X can only ever be continued, at every
point where X could end, by bytes that also start Y (start: A A with A: /a+/), then a request
that reached it is alive forever without a way to finish: every mask would still allow more
`a`s, a false accept. lark's own lexer fails on such input at parse time; a constraint must not
let the model write it. So at compile time, for every terminal X and every terminal Y in
FOLLOW(X) (context-free, so a superset of the pairs that really meet), we check that from every
DFA state of X some accepting state is reachable where a first byte of Y (or of an %ignore
terminal, which may always come between) does not extend X. If not, the grammar is refused
with both terminals, the rule and the byte named.

The check is per terminal: it does not model another terminal matching the same text at once
(a keyword inside a name), which only ever drops sentences, it cannot make a request stranded
unless that other terminal fails this check itself. GBNF runs with every split (no longest
match), where nothing can be stranded, so it needs no check.
"""

from __future__ import annotations

from sgrun.constrain.byte_dfa import ByteDFA
from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import GrammarError

Rules = list[tuple[str, list[tuple[str, object]]]]  # (lhs, [("T", terminal id) | ("N", name)])


def check_separable(rules: Rules, start: str, names: list[str], dfas: list[ByteDFA], ignore: set[int]) -> None:
    follows = _terminal_follows(rules, start)
    ignore_bytes = 0
    for i in ignore:
        ignore_bytes |= _first_bytes(dfas[i])
    cache: dict[tuple[int, int], bool] = {}
    for (x, y), rule in sorted(follows.items()):
        if x in ignore:
            continue
        f = _first_bytes(dfas[y]) | ignore_bytes
        key = (x, f)
        if key not in cache:
            cache[key] = _always_separable(dfas[x], f)
        if not cache[key]:
            b = (f & -f).bit_length() - 1
            raise GrammarError(
                f"terminals {names[x]} and {names[y]} can be adjacent (rule {rule!r}), but a longest-match lexer "
                f"can never end {names[x]} before {names[y]}: {names[x]} can always go on with {chr(b)!r}, which "
                f"starts {names[y]}, so output could never finish; put a separator (or an %ignore terminal) "
                f"between them, or make the terminals distinct")


def _first_bytes(d: ByteDFA) -> int:
    m = 0
    for mask, _ in d.edges[d.start]:
        m |= mask
    return m


def _always_separable(d: ByteDFA, follower_bytes: int) -> bool:
    """From every state, can X reach an accepting state where some follower byte does not extend it?"""
    out = [0] * d.num_states
    rev: list[list[int]] = [[] for _ in range(d.num_states)]
    for s, row in enumerate(d.edges):
        for mask, t in row:
            out[s] |= mask
            rev[t].append(s)
    good = [s for s in d.accepting if follower_bytes & ~out[s]]
    seen = set(good)
    todo = list(good)
    while todo:
        s = todo.pop()
        for p in rev[s]:
            if p not in seen:
                seen.add(p)
                todo.append(p)
        tick()
    return len(seen) == d.num_states


def _terminal_follows(rules: Rules, start: str) -> dict[tuple[int, int], str]:
    """(X, Y) for terminals Y that can come right after X in some sentential form -> a rule where."""
    reachable = {start}
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if lhs in reachable:
                for k, s in rhs:
                    if k == "N" and s not in reachable:
                        reachable.add(s)
                        changed = True
    rules = [(lhs, rhs) for lhs, rhs in rules if lhs in reachable]
    nullable: set[str] = set()
    first: dict[str, set[int]] = {lhs: set() for lhs, _ in rules}
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            got = first[lhs]
            before = len(got)
            for k, s in rhs:
                if k == "T":
                    got.add(int(s))
                    break
                got |= first.get(s, set())
                if s not in nullable:
                    break
            else:
                if lhs not in nullable:
                    nullable.add(lhs)
                    changed = True
            changed |= len(got) != before
    follow_nt: dict[str, set[int]] = {lhs: set() for lhs, _ in rules}

    def first_of(seq: list) -> tuple[set[int], bool]:
        out: set[int] = set()
        for k, s in seq:
            if k == "T":
                out.add(int(s))
                return out, False
            out |= first.get(s, set())
            if s not in nullable:
                return out, False
        return out, True

    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            for i, (k, s) in enumerate(rhs):
                if k != "N" or s not in follow_nt:
                    continue
                f, rest_nullable = first_of(rhs[i + 1:])
                if rest_nullable:
                    f = f | follow_nt[lhs]
                before = len(follow_nt[s])
                follow_nt[s] |= f
                changed |= len(follow_nt[s]) != before
    pairs: dict[tuple[int, int], str] = {}
    for lhs, rhs in rules:
        for i, (k, s) in enumerate(rhs):
            if k != "T":
                continue
            f, rest_nullable = first_of(rhs[i + 1:])
            if rest_nullable:
                f = f | follow_nt[lhs]
            for y in f:
                pairs.setdefault((int(s), y), lhs)
            tick()
    return pairs
