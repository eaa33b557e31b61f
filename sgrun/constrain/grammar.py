"""Context-free grammar constraints: a Lark grammar compiled to an LALR(1) table, run
incrementally byte by byte with a contextual, longest-match lexer whose terminals are byte DFAs.

State = (LALR state stack, the current partial token as (terminal, DFA state) candidates, whether
a token has started). Longest match: a token ends only when the next byte cannot extend it, as
lark's lexer does, so every accepted output tokenizes and parses the same way with lark.
Token masks: the parser is exposed as a lazily explored DFA over byte classes (GrammarAutomaton),
so masks come from the same vectorised vocabulary-trie walk as regex/JSON constraints; the parser
only runs for transitions not seen before; masks are cached per state.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import numpy as np
import torch

import threading

from sgrun.constrain.automaton_constraint import AutomatonConstraint
from sgrun.constrain.errors import ConstraintTooComplexError, EmptyConstraintError, GrammarError
from sgrun.constrain.lark_build import (IN_PROCESS_RULES, LalrConflict, build_lark, count_rules, lark_terminal_specs,
                                        productive_rules, terminal_dfas)
from sgrun.constrain.token_table import TokenTable

_END = "$END"
_MAX_STACK = 10_000


class LalrGrammar:
    """The parts of a lark LALR parser we need: terminal DFAs and the parse table."""

    def __init__(self, text: str, start: str = "start", terminal_nodes: dict | None = None):
        self.lark = build_lark(text, start)
        productive = productive_rules(self.lark)
        if start not in productive:
            raise EmptyConstraintError(f"the grammar admits no output at all: its start rule ({start!r}) never "
                                       f"derives a finite string (every expansion recurses or uses a rule that does)")
        table = self.lark.parser.parser.parser.parse_table
        self.states: dict[int, dict[str, tuple[Any, Any]]] = table.states
        self.start_state: int = table.start_states[start]
        self.end_state: int = table.end_states[start]
        self.ignore = set(self.lark.lexer_conf.ignore)
        self.terminals, self.dfas, self.rank = terminal_dfas(lark_terminal_specs(self.lark.terminals), terminal_nodes)
        self.term_index = {n: i for i, n in enumerate(self.terminals)}
        self._cands: dict[tuple, tuple] = {}

    def start_candidates(self, stack: tuple) -> tuple:
        """Terminals the parser can really shift next (LALR lookahead reductions replayed, so a
        token that would be a syntax error is never started), plus %ignore ones, at DFA start."""
        got = self._cands.get(stack)
        if got is None:
            acts = self.states[stack[-1]]
            got = tuple(sorted((i, self.dfas[i].start) for i, n in enumerate(self.terminals)
                               if n in self.ignore or (n in acts and self.feed(stack, n) is not None)))
            if len(self._cands) > 100_000:
                self._cands.clear()
            self._cands[stack] = got
        return got

    def feed(self, stack: tuple, terminal: str) -> tuple | None:
        """LALR step on one terminal; None if it is a syntax error."""
        states = self.states
        st = list(stack)
        while True:
            action = states[st[-1]].get(terminal)
            if action is None:
                return None
            kind, arg = action
            if str(kind) == "Shift":
                st.append(arg)
                return tuple(st) if len(st) < _MAX_STACK else None
            size = len(arg.expansion)
            if size:
                del st[-size:]
            goto = states[st[-1]].get(arg.origin.name)
            if goto is None:
                return None
            st.append(goto[1])

    def accepts_end(self, stack: tuple) -> bool:
        states = self.states
        st = list(stack)
        while True:
            action = states[st[-1]].get(_END)
            if action is None:
                return False
            kind, arg = action
            if str(kind) == "Shift":
                return False
            size = len(arg.expansion)
            if size:
                del st[-size:]
            goto = states[st[-1]].get(arg.origin.name)
            if goto is None:
                return False
            st.append(goto[1])
            if st[-1] == self.end_state:
                return True


State = tuple  # (stack, candidates, started)


class GrammarAutomaton:
    """The incremental parser seen as a lazily explored DFA over byte classes, with the same
    interface as LazyDFA, so grammar masks use the same vectorised trie walk. States are the
    interned (stack, partial token, started) tuples; state 0 is dead."""
    exhausted = False  # set when a state cap is hit: the cache then compiles afresh (cache.py)

    def __init__(self, g, max_states: int = 2_000_000):
        from sgrun.constrain.lazy_dfa import byte_classes
        self.g = g
        self.max_states = max_states
        self.lock = threading.RLock()
        masks = {m for d in g.dfas for row in d.edges for m, _ in row}
        classes = byte_classes(masks)
        self.class_masks = classes
        self.num_classes = len(classes)
        self.class_of = np.zeros(256, dtype=np.uint8 if len(classes) <= 256 else np.uint16)
        self.class_rep: list[int] = []
        for cid, m in enumerate(classes):
            self.class_rep.append((m & -m).bit_length() - 1)
            for b in range(256):
                if (m >> b) & 1:
                    self.class_of[b] = cid
        self.class_size = [bin(m).count("1") for m in classes]
        self._term_rows: dict[tuple[int, int], list] = {}
        self._states: list[State | None] = []
        self._index: dict[State, int] = {}
        self.accepting: list[bool] = []
        self.table = np.full((64, self.num_classes), -1, dtype=np.int32)
        self._states.append(None)
        self.accepting.append(False)
        self.table[0, :] = 0
        self.initial = self._intern(self._initial_state())

    def _initial_state(self) -> State:
        stack = (self.g.start_state,)
        return (stack, self.g.start_candidates(stack), False)

    @property
    def num_states(self) -> int:
        return len(self._states)

    def state(self, sid: int) -> State | None:
        return self._states[sid]

    def _intern(self, st: State | None) -> int:
        if st is None:
            return 0
        sid = self._index.get(st)
        if sid is not None:
            return sid
        sid = len(self._states)
        if sid >= self.max_states:
            self.exhausted = True
            raise ConstraintTooComplexError(f"the grammar is too complex: its automaton exceeds {self.max_states} states; simplify its terminals")
        self._states.append(st)
        self._index[st] = sid
        self.accepting.append(self._is_accepting(st))
        if sid >= self.table.shape[0]:
            grown = np.full((self.table.shape[0] * 2, self.num_classes), -1, dtype=np.int32)
            grown[: self.table.shape[0]] = self.table
            self.table = grown
        return sid

    def _finish_token(self, stack: tuple, cands: tuple) -> tuple | None:
        """End the current token: the best accepted terminal goes to the parser (ignored ones don't)."""
        g = self.g
        accepted = [i for i, s in cands if s in g.dfas[i].accepting]
        if not accepted:
            return None
        parser_terms = [i for i in accepted if g.terminals[i] not in g.ignore]
        if not parser_terms:
            return stack
        best = min(parser_terms, key=lambda i: g.rank[i])
        return g.feed(stack, g.terminals[best])

    def _is_accepting(self, st: State) -> bool:
        stack, cands, started = st
        if started:
            stack = self._finish_token(stack, cands)
            if stack is None:
                return False
        return self.g.accepts_end(stack)

    def _step(self, st: State, b: int) -> State | None:
        stack, cands, started = st
        g = self.g
        ext = tuple((i, t) for i, s in cands if (t := g.dfas[i].step(s, b)) is not None)
        if ext:
            return (stack, ext, True)  # longest match: keep extending while we can
        if not started:
            return None
        new_stack = self._finish_token(stack, cands)
        if new_stack is None:
            return None
        ext = tuple((i, t) for i, s in g.start_candidates(new_stack) if (t := g.dfas[i].step(s, b)) is not None)
        return (new_stack, ext, True) if ext else None

    def fill(self, sid: int, cls: int) -> int:
        with self.lock:
            nxt = int(self.table[sid, cls])
            if nxt < 0:
                nxt = self._intern(self._step(self._states[sid], self.class_rep[cls]))
                self.table[sid, cls] = nxt
            return nxt

    def fill_pairs(self, sids: np.ndarray, classes: np.ndarray) -> None:
        for sid, cls in zip(sids.tolist(), classes.tolist()):
            self.fill(sid, cls)

    def step(self, sid: int, byte: int) -> int:
        cls = self.class_of[byte]
        nxt = self.table[sid, cls]
        if nxt < 0:
            nxt = self.fill(sid, int(cls))
        return int(nxt)

    def row(self, sid: int) -> np.ndarray:
        r = self.table[sid]
        if (r < 0).any():
            self._fill_row(sid)
            r = self.table[sid]
        return r

    def _term_row(self, term: int, s: int) -> list:
        """Targets of one terminal-DFA state per byte class (None: the token cannot extend)."""
        key = (term, s)
        got = self._term_rows.get(key)
        if got is None:
            step = self.g.dfas[term].step
            got = [step(s, rep) for rep in self.class_rep]
            self._term_rows[key] = got
        return got

    def uniform_target(self, sid: int, classes: np.ndarray) -> int | None:
        """The state every class in `classes` leads to from `sid` (0: dead), or None."""
        tg = self.targets(sid, classes)
        first = int(tg[0])
        return None if (tg != first).any() else first

    def targets(self, sid: int, classes: np.ndarray) -> np.ndarray:
        """table[sid, classes], computing just the missing ones among `classes`."""
        got = self.table[sid, classes]
        if (got < 0).any():
            self._fill_row(sid, classes[got < 0].tolist())
            got = self.table[sid, classes]
        return got

    def _fill_row(self, sid: int, only: list[int] | None = None) -> None:
        """All classes (or those in `only`) of one state at once: the extended candidate tuples
        come from cached per-terminal rows, and the token-ending branch is computed once, not
        once per class."""
        with self.lock:
            st = self._states[sid]
            if st is None:
                return
            stack, cands, started = st
            rows = [(i, self._term_row(i, s)) for i, s in cands]
            restart: list | None = None
            out = self.table[sid].copy()
            for c in (range(self.num_classes) if only is None else only):
                if out[c] >= 0:
                    continue
                out[c] = 0
                ext = tuple((i, r[c]) for i, r in rows if r[c] is not None)
                if ext:
                    out[c] = self._intern((stack, ext, True))
                    continue
                if not started:
                    continue
                if restart is None:
                    new_stack = self._finish_token(stack, cands)
                    restart = [] if new_stack is None else [new_stack, [
                        (i, self._term_row(i, s)) for i, s in self.g.start_candidates(new_stack)]]
                if not restart:
                    continue
                ext = tuple((i, r[c]) for i, r in restart[1] if r[c] is not None)
                if ext:
                    out[c] = self._intern((restart[0], ext, True))
            self.table[sid] = out


class GrammarConstraint(AutomatonConstraint):
    """`automaton`: a GrammarAutomaton (LALR) or an EarleyAutomaton; `path` says which."""

    def __init__(self, automaton: GrammarAutomaton, spec: str, table: TokenTable):
        super().__init__("grammar", spec, automaton, table)
        self.g = automaton.g
        self.path = "earley" if type(automaton).__name__ == "EarleyAutomaton" else "lalr"

    @property
    def exhausted(self) -> bool:
        parser = getattr(self.g, "parser", None)  # the Earley path's recogniser has its own cap
        return self.dfa.exhausted or bool(parser is not None and parser.exhausted)

    def allowed_tokens(self, state: int) -> torch.Tensor:
        if len(self._masks) > 100_000:  # parser stacks can be unbounded: keep the cache bounded
            self._masks.clear()
        return super().allowed_tokens(state)


def shipped_grammar(name: str) -> str | None:
    try:
        files = resources.files("sgrun.grammars")
    except ModuleNotFoundError:
        files = None
    candidates = []
    if files is not None:
        candidates += [files / f"{name}.lark", files / f"{name}.gbnf"]
    for c in candidates:
        try:
            if c.is_file():
                return c.read_text()
        except (FileNotFoundError, OSError):
            continue
    return None


def grammar_automaton(text: str, terminal_nodes: dict | None = None, lexing: str = "greedy") -> GrammarAutomaton:
    """The fast LALR(1) path when the grammar is LALR(1) and small enough for lark to build its
    table quickly (lark_build.py), else the Earley path (earley_automaton.py).

    lexing="greedy" (Lark grammars): lark's longest-match lexer on both paths, so the path
    changes the language only where several terminals match the same longest text (LALR takes
    lark's pick by priority; Earley keeps every one the parser can take, a superset); grammars
    where that lexer could strand a request are refused (lexer_boundaries.py). lexing="all-splits" (GBNF, character-level): a token may end
    wherever it matches; only the Earley path runs that."""
    from sgrun.constrain.earley_automaton import EarleyAutomaton, EarleyGrammar
    from sgrun.constrain.lexer_boundaries import check_separable
    from sgrun.constrain.lark_build import lark_rules
    if lexing == "greedy" and count_rules(text) <= IN_PROCESS_RULES:  # big ones: lark's LALR build is superlinear
        try:
            g = LalrGrammar(text, terminal_nodes=terminal_nodes)
        except LalrConflict:
            pass  # ambiguous or needs more lookahead: the general path below
        else:
            ignore = {g.term_index[n] for n in g.ignore if n in g.term_index}
            check_separable(lark_rules(g.lark, g.term_index), "start", g.terminals, g.dfas, ignore)
            return GrammarAutomaton(g)
    eg = EarleyGrammar(text, terminal_nodes=terminal_nodes)
    if lexing == "greedy":
        check_separable(eg.rules, eg.start, eg.terminals, eg.dfas, set(eg.ignore_ids))
    return EarleyAutomaton(eg, lexing=lexing)


def compile_grammar(grammar: str, table: TokenTable) -> GrammarConstraint:
    text = grammar
    if "\n" not in grammar and ":" not in grammar:
        shipped = shipped_grammar(grammar.strip())
        if shipped is None:
            raise GrammarError(f"no shipped grammar named {grammar!r}")
        text = shipped
    if "::=" in text:
        from sgrun.constrain.gbnf import gbnf_to_lark
        translated = gbnf_to_lark(text)
        automaton = grammar_automaton(translated.lark_text, translated.terminals, lexing="all-splits")
    else:
        automaton = grammar_automaton(text)
    c = GrammarConstraint(automaton, grammar, table)
    s0 = c.initial_state
    if not c.can_continue(s0):
        if c.is_accepting(s0):
            raise GrammarError("the grammar derives only the empty string; give its start rule at least one "
                               "terminal (e.g. start: \"yes\" | \"no\")")
        raise EmptyConstraintError("the grammar admits no output at all")
    return c
