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
        self._node_class: np.ndarray | None = None

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
        """Non-special token ids whose bytes keep the automaton alive from `state`: a
        breadth-first walk of the token trie, all live nodes of one depth per numpy step."""
        t = self.table
        if self._node_class is None:
            self._node_class = self.dfa.class_of[t.node_byte].astype(np.int64)
        node_class = self._node_class
        dfa = self.dfa
        ncls = dfa.num_classes
        alive_nodes = np.zeros(t.num_nodes, dtype=np.bool_)
        row = dfa.row(state)
        st = row[node_class[t.depth1]]
        keep = st != 0
        nodes = t.depth1[keep]
        st = st[keep]
        while len(nodes):
            alive_nodes[nodes] = True
            cs = t.child_start[nodes]
            cnt = t.child_end[nodes] - cs
            has = cnt > 0
            if not has.all():
                cs, cnt, st = cs[has], cnt[has], st[has]
            total = int(cnt.sum())
            if total == 0:
                break
            offsets = np.cumsum(cnt) - cnt
            children = np.repeat(cs - offsets, cnt) + np.arange(total)
            src = np.repeat(st, cnt)
            flat = src.astype(np.int64) * ncls + node_class[children]
            nxt = dfa.table.ravel()[flat]
            unknown = nxt < 0
            if unknown.any():
                pairs = np.unique(flat[unknown])
                dfa.fill_pairs(pairs // ncls, pairs % ncls)
                nxt = dfa.table.ravel()[flat]
            keep = nxt != 0
            nodes = children[keep]
            st = nxt[keep]
        return t.token_ids[alive_nodes[t.token_node]]

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
