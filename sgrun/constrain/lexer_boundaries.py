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

The check is per terminal: it does not model two terminals matching the same text at once (a
keyword inside a name). Such a pair could in principle still strand a request, if each of them
could only end where the other goes on; we know of no grammar like that outside constructed
examples. Since FOLLOW is context-free, a grammar can be refused for a pair that never meets.
GBNF runs with every split (no longest match), where nothing can be stranded: no check.
"""

from __future__ import annotations

from sgrun.constrain.byte_dfa import ByteDFA, co_reachable
from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import GrammarError

Rules = list[tuple[str, list[tuple[str, object]]]]  # (lhs, [("T", terminal id) | ("N", name)])


def check_separable(rules: Rules, start: str, names: list[str], dfas: list[ByteDFA], ignore: set[int]) -> None:
    follow, where = _terminal_follows(rules, start, len(names))
    ignore_bytes = 0
    for i in ignore:
        ignore_bytes |= _first_bytes(dfas[i])
    groups: dict[int, int] = {}  # a first-byte set -> bitmask of the terminals that start with it
    for y, d in enumerate(dfas):
        f = _first_bytes(d)
        groups[f] = groups.get(f, 0) | (1 << y)
    for x, d in enumerate(dfas):
        if x in ignore or not follow[x] or not any(row for s, row in enumerate(d.edges) if s in d.accepting):
            continue  # never followed, or it cannot go on once it matches (a literal): always ends
        for f, members in groups.items():
            both = follow[x] & members
            if both and not _always_separable(d, f | ignore_bytes):
                y = (both & -both).bit_length() - 1
                b = (f & -f).bit_length() - 1
                raise GrammarError(
                    f"terminals {names[x]} and {names[y]} can be adjacent ({names[x]} is used in rule "
                    f"{where[x]!r}), but a longest-match lexer can never end {names[x]} before {names[y]}: "
                    f"{names[x]} can always go on with {chr(b)!r}, which starts {names[y]}, so an output could get "
                    f"stuck where it can never finish; put a separator (or an %ignore terminal) between them, or "
                    f"make the terminals distinct")


def _first_bytes(d: ByteDFA) -> int:
    m = 0
    for mask, _ in d.edges[d.start]:
        m |= mask
    return m


def _always_separable(d: ByteDFA, follower_bytes: int) -> bool:
    """From every state, can X reach an accepting state where some follower byte does not extend it?"""
    out = [0] * d.num_states
    for s, row in enumerate(d.edges):
        for mask, _ in row:
            out[s] |= mask
    good = [s for s in d.accepting if follower_bytes & ~out[s]]
    return len(co_reachable(d, good, on_visit=tick)) == d.num_states


def _terminal_follows(rules: Rules, start: str, num_terminals: int) -> tuple[list[int], dict[int, str]]:
    """Per terminal, the bitmask of terminals that can come right after it in some sentential
    form, and a rule it is used in. Sets are Python ints (bit i = terminal i); every fixpoint is
    a worklist, so a chain of thousands of rules costs linear passes, not quadratic ones."""
    reachable = {start}
    todo = [start]
    by_lhs: dict[str, list[list]] = {}
    for lhs, rhs in rules:
        by_lhs.setdefault(lhs, []).append(rhs)
    while todo:
        n = todo.pop()
        for rhs in by_lhs.get(n, ()):
            for k, s in rhs:
                if k == "N" and s not in reachable:
                    reachable.add(s)
                    todo.append(s)
    rules = [(lhs, rhs) for lhs, rhs in rules if lhs in reachable]
    users: dict[str, list[tuple[int, int]]] = {}  # nonterminal -> (rule, position) where it occurs
    for r, (lhs, rhs) in enumerate(rules):
        for i, (k, s) in enumerate(rhs):
            if k == "N":
                users.setdefault(s, []).append((r, i))
    nullable: set[str] = set()
    todo = [lhs for lhs, rhs in rules if not rhs]
    # a rule is nullable once every symbol of it is a nullable nonterminal (terminals never are)
    nullable_rule_left = [len(rhs) if all(k == "N" for k, _ in rhs) else -1 for _, rhs in rules]
    while todo:
        n = todo.pop()
        if n in nullable:
            continue
        nullable.add(n)
        for r, _ in users.get(n, ()):
            nullable_rule_left[r] -= 1
            if nullable_rule_left[r] == 0 and rules[r][0] not in nullable:
                todo.append(rules[r][0])
    first: dict[str, int] = {}

    def seq_first(rhs: list, i: int) -> tuple[int, bool]:
        m = 0
        for k, s in rhs[i:]:
            if k == "T":
                return m | (1 << int(s)), False
            m |= first.get(s, 0)
            if s not in nullable:
                return m, False
        return m, True

    todo = list({lhs for lhs, _ in rules})
    while todo:  # FIRST: recompute a nonterminal when one it starts with grew
        n = todo.pop()
        m = first.get(n, 0)
        for rhs in by_lhs.get(n, ()):
            m |= seq_first(rhs, 0)[0]
        if m != first.get(n, 0):
            first[n] = m
            todo.extend({rules[r][0] for r, _ in users.get(n, ())})
        tick()
    follow_nt: dict[str, int] = {}
    todo = list({lhs for lhs, _ in rules})
    while todo:  # FOLLOW of nonterminals: recompute when the rule it ends grew its FOLLOW
        n = todo.pop()
        m = follow_nt.get(n, 0)
        for r, i in users.get(n, ()):
            f, rest_nullable = seq_first(rules[r][1], i + 1)
            m |= f | (follow_nt.get(rules[r][0], 0) if rest_nullable else 0)
        if m != follow_nt.get(n, 0):
            follow_nt[n] = m
            for rhs in by_lhs.get(n, ()):
                todo.extend(s for k, s in rhs if k == "N")
        tick()
    follow = [0] * num_terminals
    where: dict[int, str] = {}
    for lhs, rhs in rules:
        for i, (k, s) in enumerate(rhs):
            if k == "T":
                f, rest_nullable = seq_first(rhs, i + 1)
                follow[int(s)] |= f | (follow_nt.get(lhs, 0) if rest_nullable else 0)
                where.setdefault(int(s), lhs)
    return follow, where
