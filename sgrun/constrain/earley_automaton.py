"""The Earley path for grammars LALR(1) cannot run: the Earley recogniser (earley.py) behind a
byte-level lexer made of the terminals' byte DFAs, seen as a lazily explored DFA over byte
classes with GrammarAutomaton's interface, so masks come from the same MaskBuilder walk.

Two lexing policies:
- "greedy" (Lark grammars, as on the LALR path and in lark's lexers): a token ends only where
  the next byte cannot extend it; among the terminals that match the same text, every one the
  parser can take is scanned (one Earley step over the set), and an %ignore match is kept as a
  second alternative. lexer_boundaries.py refuses grammars where this lexer could strand a
  request (a terminal that can never be ended before the one that must follow it).
- "all-splits" (GBNF): a token may end at any byte where one of its terminals matches: lark's
  Earley `lexer="dynamic_complete"`, and llama.cpp's character-level semantics. The language
  is exactly the grammar's, with no lexing caveat: a token that could end here or go on is
  followed both ways (the state keeps alternatives).
Either way every alive state is a prefix of a sentence (Earley sets are viable prefixes, rules
are productive, terminal DFAs are trimmed) and every sentence (lexed by the policy) is
accepted: masks are exact.

State = a sorted tuple of alternatives (earley set id, partial token), where the partial token
is a sorted tuple of (terminal, DFA state) candidates, () at a token boundary; alternatives with
the same Earley set are merged (their candidates are independent). At most MAX_ALTERNATIVES.
"""

from __future__ import annotations

from sgrun.constrain.earley import EarleyRecognizer
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.grammar_automaton import GrammarAutomaton
from sgrun.constrain.lark_build import bnf_rules, grammar_parts, terminal_dfas

MAX_ALTERNATIVES = 64

State = tuple  # ((earley set id, ((terminal, dfa state), ...)), ...)


class EarleyGrammar:
    """A Lark grammar (or a GBNF translation) compiled for the Earley path."""

    def __init__(self, text: str, start: str = "start", terminal_nodes: dict | None = None):
        parts = grammar_parts(text, start)
        self.terminals, self.dfas, self.rank = terminal_dfas(parts.terminals, terminal_nodes)
        self.term_index = {n: i for i, n in enumerate(self.terminals)}
        self.ignore = set(parts.ignore)
        self.ignore_ids = frozenset(self.term_index[n] for n in self.ignore if n in self.term_index)
        self.rules = bnf_rules(parts.rules, self.term_index)
        self.start = start
        self.parser = EarleyRecognizer(self.rules, len(self.terminals), start)
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
    def __init__(self, g: EarleyGrammar, lexing: str = "greedy", max_states: int = 2_000_000):
        if lexing not in ("greedy", "all-splits"):
            raise ValueError(f"lexing must be 'greedy' or 'all-splits', not {lexing!r}")
        self.lexing = lexing
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

    def _parts(self, st: State) -> list[tuple[tuple[int, list], list[tuple[int, list]]]]:
        """Per alternative: (its token's own (Earley set, [(terminal, per-class row)]), the ways to
        end that token and start the next one: [(Earley set after it, start rows)])."""
        parts = []
        for sid, cands in st:
            if not cands:
                parts.append(((sid, self._starts(sid)), []))
                continue
            own = (sid, [(i, self._term_row(i, s)) for i, s in cands])
            acc = self._accepted(cands)
            after = [(nxt, self._starts(nxt)) for nxt in self.g.finish(sid, acc)] if acc else []
            parts.append((own, after))
        return parts

    def _target(self, parts: list, c: int) -> State | None:
        merged: dict[int, set] = {}
        greedy = self.lexing == "greedy"
        for (sid, rows), after in parts:
            ext = [(i, r[c]) for i, r in rows if r[c] is not None]
            if ext:
                merged.setdefault(sid, set()).update(ext)
                if greedy:
                    continue  # longest match: a token that can go on does not end here
            for sid2, rows2 in after:
                ext = [(i, r[c]) for i, r in rows2 if r[c] is not None]
                if ext:
                    merged.setdefault(sid2, set()).update(ext)
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
