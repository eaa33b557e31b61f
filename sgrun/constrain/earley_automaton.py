"""The Earley path for grammars LALR(1) cannot run: the Earley recogniser (earley.py) behind a
byte-level lexer made of the terminals' byte DFAs, seen as a lazily explored DFA over byte
classes with GrammarAutomaton's interface, so masks come from the same MaskBuilder walk.

Lexing policy ("all splits"): a token may end at any byte where one of its terminals matches,
not only where the next byte cannot extend it. This is lark's Earley `lexer="dynamic_complete"`
and llama.cpp's character-level GBNF semantics: the language is exactly the grammar's, with no
lexing caveat, so there is no terminal-boundary choice to get wrong:
- several terminals matching the same text are all scanned (one Earley step over the set);
- a token that could end here or go on is followed both ways (the state keeps alternatives);
- terminals that can never be told apart by a longest-match lexer (start: A A, A: /a+/) are
  fine: every split is tried, so no state is alive without a way to finish.
Every alive state is therefore a prefix of a sentence (Earley sets are viable prefixes, rules
are productive, terminal DFAs are trimmed) and every sentence is accepted: masks are exact.
(The LALR fast path keeps lark's contextual longest-match lexer; see grammar.py.)

State = a sorted tuple of alternatives (earley set id, partial token), where the partial token
is a sorted tuple of (terminal, DFA state) candidates, () at a token boundary; alternatives with
the same Earley set are merged (their candidates are independent). At most MAX_ALTERNATIVES.
"""

from __future__ import annotations

from sgrun.constrain.earley import EarleyRecognizer
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.grammar import GrammarAutomaton
from sgrun.constrain.lark_build import build_lark_earley, terminal_dfas

MAX_ALTERNATIVES = 64

State = tuple  # ((earley set id, ((terminal, dfa state), ...)), ...)


class EarleyGrammar:
    """A Lark grammar (or a GBNF translation) compiled for the Earley path."""

    def __init__(self, text: str, start: str = "start", terminal_nodes: dict | None = None):
        self.lark = build_lark_earley(text, start)
        self.terminals, self.dfas, self.rank = terminal_dfas(self.lark, terminal_nodes)
        self.term_index = {n: i for i, n in enumerate(self.terminals)}
        self.ignore = set(self.lark.lexer_conf.ignore)
        self.ignore_ids = frozenset(self.term_index[n] for n in self.ignore if n in self.term_index)
        rules = [(str(r.origin.name), [("T", self.term_index[s.name]) if s.is_term else ("N", str(s.name))
                                       for s in r.expansion]) for r in self.lark.rules]
        self.parser = EarleyRecognizer(rules, len(self.terminals), start)
        self._cands: dict[int, tuple] = {}

    def start_candidates(self, sid: int) -> tuple[tuple[int, int], ...]:
        """Terminals that may start here (those the parser expects, plus %ignore ones), at DFA start."""
        got = self._cands.get(sid)
        if got is None:
            terms = set(self.parser.expected(sid)) | self.ignore_ids
            got = tuple(sorted((i, self.dfas[i].start) for i in terms))
            self._cands[sid] = got
        return got

    def finish(self, sid: int, accepted: tuple[int, ...]) -> list[int]:
        """Earley sets after a token that any of the `accepted` terminals matches: the scan of all
        of them at once, and `sid` itself when an %ignore terminal matches (it is skipped)."""
        out = []
        nxt = self.parser.scan(sid, accepted)
        if nxt is not None:
            out.append(nxt)
        if self.ignore_ids and not self.ignore_ids.isdisjoint(accepted):
            out.append(sid)
        return out


class EarleyAutomaton(GrammarAutomaton):
    def __init__(self, g: EarleyGrammar, max_states: int = 2_000_000):
        self._start_rows: dict[int, list] = {}
        super().__init__(g, max_states)

    def _initial_state(self) -> State:
        return ((self.g.parser.initial, ()),)

    def _accepted(self, cands: tuple) -> tuple[int, ...]:
        dfas = self.g.dfas
        return tuple(sorted({i for i, s in cands if s in dfas[i].accepting}))

    def _is_accepting(self, st: State) -> bool:
        g = self.g
        for sid, cands in st:
            if not cands:
                if g.parser.accepts(sid):
                    return True
                continue
            acc = self._accepted(cands)
            if acc and any(g.parser.accepts(n) for n in g.finish(sid, acc)):
                return True
        return False

    def _starts(self, sid: int) -> list:
        got = self._start_rows.get(sid)
        if got is None:
            got = [(i, self._term_row(i, s)) for i, s in self.g.start_candidates(sid)]
            if len(self._start_rows) > 100_000:
                self._start_rows.clear()
            self._start_rows[sid] = got
        return got

    def _parts(self, st: State) -> list[tuple[int, list]]:
        """(Earley set, [(terminal, its per-class row)]) for every way the next byte can be read:
        extending each alternative's token, or ending it (each way the token can end) and
        starting the next one."""
        parts: list[tuple[int, list]] = []
        for sid, cands in st:
            if not cands:
                parts.append((sid, self._starts(sid)))
                continue
            parts.append((sid, [(i, self._term_row(i, s)) for i, s in cands]))
            acc = self._accepted(cands)
            if acc:
                for nxt in self.g.finish(sid, acc):
                    parts.append((nxt, self._starts(nxt)))
        return parts

    def _target(self, parts: list[tuple[int, list]], c: int) -> State | None:
        merged: dict[int, set] = {}
        for sid, rows in parts:
            ext = [(i, r[c]) for i, r in rows if r[c] is not None]
            if ext:
                merged.setdefault(sid, set()).update(ext)
        if not merged:
            return None
        if len(merged) > MAX_ALTERNATIVES:
            raise ConstraintTooComplexError(
                f"the grammar is too ambiguous to follow here: the text so far splits into tokens in more than "
                f"{MAX_ALTERNATIVES} ways that lead to different parser states; make its terminals less alike")
        return tuple(sorted((sid, tuple(sorted(c))) for sid, c in merged.items()))

    def _step(self, st: State, b: int) -> State | None:
        return self._target(self._parts(st), int(self.class_of[b]))

    def _fill_row(self, sid: int, only: list[int] | None = None) -> None:
        with self.lock:
            st = self._states[sid]
            if st is None:
                return
            parts = self._parts(st)
            out = self.table[sid].copy()
            for c in (range(self.num_classes) if only is None else only):
                if out[c] < 0:
                    out[c] = self._intern(self._target(parts, c))
            self.table[sid] = out
