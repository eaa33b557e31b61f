"""GrammarAutomaton: an incremental grammar parser seen as a lazily explored DFA over byte
classes, with LazyDFA's interface, so grammar masks come from the same vectorised trie walk as
regex and JSON constraints. The LALR path (grammar.py) and the Earley path (earley_automaton.py)
both run through it; it knows only the parser interface `g` (`start`, `dfas`, `step`, ...),
never which path built it, so neither imports the other."""

from __future__ import annotations

import threading

import numpy as np

from sgrun.constrain.errors import ConstraintTooComplexError

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
