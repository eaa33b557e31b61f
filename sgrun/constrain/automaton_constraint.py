"""A Constraint backed by a LazyDFA (regex, JSON Schema, choices): token masks come from
MaskBuilder (the cheapest exact method for each state), cached per DFA state."""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import torch

from sgrun.constrain.constraint import MAX_FORCED_BYTES, Constraint
from sgrun.constrain.errors import ConstraintTooComplexError
from sgrun.constrain.lazy_dfa import LazyDFA
from sgrun.constrain.mask_builder import MaskBuilder, pack
from sgrun.constrain.token_table import TokenTable


# Compile-time mask precompute budget per constraint. Small on purpose: compile latency is on
# every new schema's request path (target p50 <= 2 ms), while a mask computed later on the
# engine loop costs the same once and is then cached for every request of that schema. The
# compile-time pass only takes sparse states (keys, punctuation, literals: first-request masks
# are 15-21 us at the median); a dense state (a string body) would take the whole budget alone.
# 0.3 ms covers the first state and a few after it. At 2 ms (until 6 December 2026) it was 1.5-2 ms
# of a ~12 ms compile p50; cut to 0.3 ms, the first-request mask p99 stayed within run-to-run
# noise (192-242 against 194-297 us, benchmarks/bench_constrain.py --first-masks,
# docs/benchmarks-constrain.md).
WARM_UP_S = 0.0003
WARM_UP_STATES = 64  # and at most this many masks (6 KB each)


class AutomatonConstraint(Constraint):
    def __init__(self, kind: str, spec: str, dfa: LazyDFA, table: TokenTable):
        self.kind = kind
        self.spec = spec
        self.dfa = dfa
        self.table = table
        self._masks: dict[int, torch.Tensor] = {}
        self._forced: dict[int, bytes] = {}
        self._builder: MaskBuilder | None = MaskBuilder(dfa, table)  # built at compile time, off the engine loop

    @property
    def exhausted(self) -> bool:
        return self.dfa.exhausted

    @property
    def initial_state(self) -> int:
        return self.dfa.initial

    @property
    def num_states(self) -> int:
        return self.dfa.num_states

    def step_bytes(self, state: int, data: bytes) -> int | None:
        whole = getattr(self.dfa, "step_bytes", None)
        if whole is not None:  # the C++ automaton: one call per token
            state = whole(state, data)
            return None if state == 0 else state
        step = self.dfa.step
        for b in data:
            state = step(state, b)
            if state == 0:
                return None
        return state

    def is_accepting(self, state: int) -> bool:
        return self.dfa.accepting[state]

    def can_continue(self, state: int) -> bool:
        return bool((self.dfa.row(state) != 0).any())

    def allowed_tokens(self, state: int) -> torch.Tensor:
        m = self._masks.get(state)
        if m is None:
            m = self._store(state, self.builder.packed(state))
        return m

    def _store(self, state: int, words: np.ndarray) -> torch.Tensor:
        if self.dfa.accepting[state] and len(self.table.eos_ids):
            pack(self.table.eos_ids, self.table.words, words)
        m = torch.from_numpy(words)
        self._masks[state] = m
        return m

    def warm_up(self, budget_s: float = WARM_UP_S, max_states: int = WARM_UP_STATES, dense: bool = False) -> int:
        """At compile time (off the engine loop), compute the masks of the states a request meets
        first: breadth-first over the states that allowed tokens lead to, from the initial state,
        within a time and state budget. Structural states (keys, punctuation, literals) and whole
        string bodies (one chain batch) are cheap to expand; states that need the full numpy
        walk are masked but not expanded. dense=False (the compile-time default) skips states
        with many allowed bytes (string bodies, free keys) and what lies behind them. Returns
        the number of masks computed."""
        b = self.builder
        b.record_successors = True
        deadline = time.perf_counter() + budget_s
        seen = {self.initial_state}
        queue = deque([self.initial_state])
        done = 0
        try:
            while queue and done < max_states and time.perf_counter() < deadline:
                s = queue.popleft()
                try:
                    if s not in self._masks:
                        words = b.packed(s) if dense else b.sparse_packed(s)
                        if words is None:
                            continue
                        self._store(s, words)
                except ConstraintTooComplexError:
                    break  # over the automaton's size cap: a request that goes there fails then, not the compile
                done += 1
                for q in sorted(b.successors.get(s, ())):
                    if q not in seen:
                        seen.add(q)
                        queue.append(q)
        finally:
            b.record_successors = False
            b.successors.clear()
        return done

    @property
    def builder(self) -> MaskBuilder:
        if self._builder is None:
            self._builder = MaskBuilder(self.dfa, self.table)
        return self._builder

    def allowed_token_ids(self, state: int) -> np.ndarray:
        """Non-special token ids whose bytes keep the automaton alive from `state`."""
        words = self.builder.packed(state)
        ids = np.nonzero(np.unpackbits(words.view(np.uint8), bitorder="little"))[0]
        return ids[ids < self.table.vocab_size].astype(np.int64)

    def forced_bytes(self, state: int) -> bytes:
        got = self._forced.get(state)
        if got is not None:
            return got
        out = bytearray()
        s = state
        dfa = self.dfa
        while len(out) < MAX_FORCED_BYTES and not dfa.accepting[s]:
            row = dfa.row(s)
            live = np.nonzero(row)[0]
            if len(live) != 1 or dfa.class_size[int(live[0])] != 1:
                break
            out.append(dfa.class_rep[int(live[0])])
            s = int(row[live[0]])
        got = bytes(out)
        self._forced[state] = got
        return got
