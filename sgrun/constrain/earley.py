"""An incremental Earley recogniser over terminal ids, for grammars LALR(1) cannot run:
ambiguous ones, reduce/reduce or shift/reduce conflicts, more than one token of lookahead.

Each Earley set is interned: its items are (dotted rule, origin) where the origin is the id of
an earlier interned set, or SELF for items predicted in the set itself. Two prefixes whose sets
hold the same items (with the same origin ids) behave the same from there on, so a set id is a
complete parser configuration; GrammarAutomaton-style lexers key their states by it, and masks
are cached per set like per LALR stack. Nullable nonterminals follow Aycock and Horspool (the dot
moves over a nullable symbol at prediction), so completion never looks for items added later.

Bounds: a set may hold at most MAX_ITEMS items (a highly ambiguous grammar grows them per
token) and at most MAX_SETS sets are kept; past either, ConstraintTooComplexError names the cap.
Only productive rules are kept, so every non-empty set is a viable prefix of some sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import ConstraintTooComplexError, EmptyConstraintError

SELF = -1
MAX_ITEMS = 20_000
MAX_SETS = 400_000

Item = tuple[int, int]  # (dotted rule, origin set id or SELF)


@dataclass
class EarleySet:
    items: frozenset[Item]
    waiting: dict[int, tuple[Item, ...]]   # nonterminal -> items whose next symbol it is (origins resolved)
    scans: dict[int, tuple[Item, ...]]     # terminal -> items whose next symbol it is (origins resolved)
    accepting: bool
    expected: tuple[int, ...] = field(default=())  # terminals some item can scan next


class EarleyRecognizer:
    """rules: (lhs, rhs) with rhs symbols as ("T", terminal id) or ("N", nonterminal name)."""
    exhausted = False  # set when a state cap is hit: the cache then compiles afresh (cache.py)

    def __init__(self, rules: list[tuple[str, list[tuple[str, object]]]], num_terminals: int, start: str,
                 max_items: int = MAX_ITEMS, max_sets: int = MAX_SETS):
        self.max_items = max_items
        self.max_sets = max_sets
        rules = _productive(rules)
        names = sorted({lhs for lhs, _ in rules} | {start})
        self.nt_index = {n: i for i, n in enumerate(names)}
        self.nt_names = names
        T = num_terminals
        # dotted rules: d_next[d] = next symbol (terminal id, T + nonterminal id, or -1 when complete)
        self.d_next: list[int] = []
        self.d_lhs: list[int] = []
        self.d_rule: list[int] = []
        self.predict: list[list[int]] = [[] for _ in names]
        augmented = [("$start", [("N", start)])] + rules
        for r, (lhs, rhs) in enumerate(augmented):
            lhs_id = self.nt_index.get(lhs, -1)
            if lhs_id >= 0:
                self.predict[lhs_id].append(len(self.d_next))
            for kind, sym in rhs:
                self.d_next.append(int(sym) if kind == "T" else T + self.nt_index[sym])
                self.d_lhs.append(lhs_id)
                self.d_rule.append(r)
            self.d_next.append(-1)
            self.d_lhs.append(lhs_id)
            self.d_rule.append(r)
        self.accept_d = len(augmented[0][1])  # "$start -> start ." is the last dotted rule of rule 0
        self.T = T
        self.nullable = _nullable(augmented, self.nt_index)
        self.sets: list[EarleySet] = []
        self._index: dict[frozenset, int] = {}
        self._scan_memo: dict[tuple[int, tuple[int, ...]], int | None] = {}
        if start not in {lhs for lhs, _ in rules}:
            raise EmptyConstraintError(f"the grammar admits no output at all: its start rule ({start!r}) never "
                                       f"derives a finite string (every expansion recurses or uses a rule that does)")
        self.initial = self._close([(0, SELF)])

    # --- public --------------------------------------------------------------------------
    def expected(self, sid: int) -> tuple[int, ...]:
        return self.sets[sid].expected

    def accepts(self, sid: int) -> bool:
        return self.sets[sid].accepting

    def scan(self, sid: int, terminals: tuple[int, ...]) -> int | None:
        """The set after scanning any one of `terminals` (sorted) from set `sid`; None if none fits."""
        key = (sid, terminals)
        memo = self._scan_memo
        if key in memo:
            return memo[key]
        scans = self.sets[sid].scans
        kernel = [(d + 1, o) for t in terminals for d, o in scans.get(t, ())]
        got = self._close(kernel) if kernel else None
        if len(memo) > 4 * self.max_sets:
            memo.clear()
        memo[key] = got
        return got

    # --- construction --------------------------------------------------------------------
    def _close(self, kernel: list[Item]) -> int:
        d_next, d_lhs, T, sets = self.d_next, self.d_lhs, self.T, self.sets
        nullable, predict = self.nullable, self.predict
        items: set[Item] = set(kernel)
        todo = list(items)
        waiting_self: dict[int, list[Item]] = {}
        predicted: set[int] = set()
        cap = self.max_items
        while todo:
            d, o = todo.pop()
            nxt = d_next[d]
            new: list[Item]
            if nxt < 0:  # complete: advance the items that waited on this nonterminal at its origin
                n = d_lhs[d]
                if n < 0:
                    continue
                if o == SELF:  # an empty derivation within this set: nullable, handled at prediction
                    new = [(d2 + 1, o2) for d2, o2 in waiting_self.get(n, ())]
                else:
                    new = [(d2 + 1, o2) for d2, o2 in sets[o].waiting.get(n, ())]
            elif nxt >= T:
                n = nxt - T
                waiting_self.setdefault(n, []).append((d, o))
                new = [(d0, SELF) for d0 in predict[n]] if n not in predicted else []
                predicted.add(n)
                if n in nullable:
                    new.append((d + 1, o))
            else:
                continue
            for it in new:
                if it not in items:
                    items.add(it)
                    todo.append(it)
            if len(items) > cap:
                raise ConstraintTooComplexError(
                    f"the grammar is too ambiguous to follow here: one Earley state holds more than {cap} items "
                    f"(the per-token cap); make the grammar less ambiguous (fewer rules that match the same text)")
            tick()
        key = frozenset(items)
        sid = self._index.get(key)
        if sid is not None:
            return sid
        sid = len(sets)
        if sid >= self.max_sets:
            self.exhausted = True
            raise ConstraintTooComplexError(
                f"the grammar is too complex: its Earley parser exceeded {self.max_sets} distinct states")
        waiting: dict[int, list[Item]] = {}
        scans: dict[int, list[Item]] = {}
        accepting = False
        for d, o in key:
            o_res = sid if o == SELF else o
            nxt = d_next[d]
            if nxt < 0:
                if d == self.accept_d and o_res == 0:  # the initial set is always set 0
                    accepting = True
            elif nxt >= T:
                waiting.setdefault(nxt - T, []).append((d, o_res))
            else:
                scans.setdefault(nxt, []).append((d, o_res))
        s = EarleySet(key, {n: tuple(v) for n, v in waiting.items()}, {t: tuple(v) for t, v in scans.items()},
                      accepting, tuple(sorted(scans)))
        sets.append(s)
        self._index[key] = sid
        return sid


def _productive(rules: list[tuple[str, list]]) -> list[tuple[str, list]]:
    """Rules whose every nonterminal derives some finite string (others can never complete, and
    an item predicting them could scan terminals that lead nowhere)."""
    productive: set[str] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if lhs not in productive and all(k == "T" or s in productive for k, s in rhs):
                productive.add(lhs)
                changed = True
    return [(lhs, rhs) for lhs, rhs in rules
            if lhs in productive and all(k == "T" or s in productive for k, s in rhs)]


def _nullable(rules: list[tuple[str, list]], nt_index: dict[str, int]) -> set[int]:
    out: set[int] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            n = nt_index.get(lhs, -1)
            if n >= 0 and n not in out and all(k == "N" and nt_index[s] in out for k, s in rhs):
                out.add(n)
                changed = True
    return out
