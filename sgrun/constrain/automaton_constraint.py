"""A Constraint backed by a LazyDFA (regex, JSON Schema, choices): token masks come from
stepping the whole vocabulary through the byte automaton at once, cached per DFA state."""

from __future__ import annotations

import numpy as np
import torch

from sgrun.constrain.bitmask import pack_token_ids
from sgrun.constrain.constraint import MAX_FORCED_BYTES, Constraint
from sgrun.constrain.lazy_dfa import LazyDFA
from sgrun.constrain.token_table import TokenTable


class AutomatonConstraint(Constraint):
    def __init__(self, kind: str, spec: str, dfa: LazyDFA, table: TokenTable):
        self.kind = kind
        self.spec = spec
        self.dfa = dfa
        self.table = table
        self._masks: dict[int, torch.Tensor] = {}
        self._forced: dict[int, bytes] = {}
        self._class_columns: np.ndarray | None = None

    @property
    def initial_state(self) -> int:
        return self.dfa.initial

    @property
    def num_states(self) -> int:
        return self.dfa.num_states

    def step_bytes(self, state: int, data: bytes) -> int | None:
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
            ids = self.allowed_token_ids(state)
            if self.dfa.accepting[state] and len(self.table.eos_ids):
                ids = np.concatenate([ids, self.table.eos_ids])
            m = pack_token_ids(ids, self.table.vocab_size)
            self._masks[state] = m
        return m

    def allowed_token_ids(self, state: int) -> np.ndarray:
        """Non-special token ids whose bytes keep the automaton alive from `state`."""
        if self._class_columns is None:
            self._class_columns = self.dfa.class_of[self.table.columns]
        cols = self._class_columns
        dfa = self.dfa
        count_longer = self.table.count_longer
        n = int(count_longer[0]) if len(count_longer) else 0
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        # Step 0 from a single state: one row lookup for the whole vocabulary.
        row = dfa.row(state)
        cur = row[cols[0, :n]]
        keep = np.nonzero(cur)[0]
        alive = keep
        cur = cur[keep]
        for j in range(1, cols.shape[0]):
            k = int(np.searchsorted(alive, count_longer[j]))  # alive tokens longer than j
            if k == 0:
                break
            act = alive[:k]
            cls = cols[j, act]
            src = cur[:k]
            nxt = dfa.table[src, cls]
            unknown = nxt < 0
            if unknown.any():
                pairs = np.unique(src[unknown].astype(np.int64) * dfa.num_classes + cls[unknown])
                dfa.fill_pairs(pairs // dfa.num_classes, pairs % dfa.num_classes)
                nxt = dfa.table[src, cls]
            ok = nxt != 0
            if ok.all():
                cur[:k] = nxt
                continue
            alive = np.concatenate([act[ok], alive[k:]])
            cur = np.concatenate([nxt[ok], cur[k:]])
        return self.table.order[alive]

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
