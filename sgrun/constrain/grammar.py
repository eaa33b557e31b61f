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

import torch

from sgrun.constrain.automaton_constraint import AutomatonConstraint
from sgrun.constrain.errors import EmptyConstraintError, GrammarError
from sgrun.constrain.grammar_automaton import GrammarAutomaton
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
