"""Constrained output that fits max_new_tokens: refuse what cannot fit, steer what can.

A request's budget is its max_new_tokens. When even the shortest valid output needs more
tokens than that, `budgeted_matcher` by default gives the constraint's plain matcher: the request
runs, is cut at max_new_tokens and ends with finish "length", as OpenAI's API and every peer
answer (clients send a small max_tokens on purpose, to probe logprobs or their own truncation
handling). With `refuse=True` (SamplingParams.strict_budget, the server's `strict_budget` request
field or `sgrun serve --strict-budget`) it refuses the request up front instead
(OutputBudgetError, a 400 naming max_tokens on the server). Where the output fits, each request
gets a BudgetMatcher: while the tokens left
are far more than the shortest valid ending needs, its mask is the constraint's; once they come
within STEER_WINDOW tokens, the mask keeps only tokens after which a valid ending still fits in
what is left. The output then closes validly within the budget instead of being cut mid-value:
with exactly enough tokens it is the shortest ending, with a few more the model still chooses
among the endings that fit. A JSON value's closing brace ends the output by itself (finish
"stop"), a tool call's end keeps a token for EOS; where the constraint may end anywhere (free
text, a top-level number) the output is valid when the budget runs out and reports "length",
as a plain request would.

Token counts come from shortest_completion.py (an upper bound that is consistent: from a state
that needs n there is always a token to one that needs n - 1), so the set never runs empty.
The per-token counts after a state are computed once per state (every allowed token's bytes
walked through the DFA at once, vectorised) and cached on the constraint for all requests.

Limit: outside the window the mask is not filtered, so a single token that commits to a
structure whose shortest instance exceeds STEER_WINDOW tokens (an optional property holding
dozens of required ones) can leave too few tokens; inside it the guarantee is exact.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import numpy as np
import torch

from sgrun.constrain.bitmask import unpack_bitmask
from sgrun.constrain.constraint import _FINISHED, Constraint, Matcher
from sgrun.constrain.mask_builder import pack
from sgrun.constrain.shortest_completion import INF, ShortestCompletion, shortest_completion
from sgrun.constrain.token_spelling import per_vocabulary
from sgrun.errors import InvalidRequestError

STEER_WINDOW = 48          # tokens of slack under which the mask is filtered by the budget
MAX_CACHED_STATES = 256    # per constraint: states whose per-token ending counts are kept


class OutputBudgetError(InvalidRequestError):
    """max_new_tokens is below what the shortest output the constraint allows needs."""

    def __init__(self, budget: int, needed: int, field: str = "max_new_tokens"):
        self.budget, self.needed = budget, needed
        super().__init__(self.message_for(field), field=field)

    def message_for(self, name: str) -> str:
        """The message under the client's name for the field (max_tokens on the OpenAI API)."""
        return (f"{name} is {self.budget}, but the shortest output the constraint allows needs {self.needed} "
                f"tokens: raise {name} to at least {self.needed}, or loosen the constraint")


def budgeted_matcher(constraint: Constraint, max_new_tokens: int, refuse: bool = False):
    """A factory of the request's matchers (one per sample): BudgetMatchers where the constraint
    has a lazy DFA and a valid output fits, its plain Matcher otherwise (the output is then cut at
    max_new_tokens, finish "length"). With `refuse`, an output that cannot fit raises
    OutputBudgetError instead."""
    sc = shortest_completion(constraint)
    if sc is None:
        return constraint.matcher
    start = constraint.initial_state
    # Cheap first: every byte is a token, so bytes + EOS bound the tokens.
    if not (sc.spelling.every_byte_is_a_token and sc.byte_distance(start) + 1 <= max_new_tokens):
        needed = sc.tokens_needed(start)
        if needed > max_new_tokens:
            if not refuse:
                return constraint.matcher
            raise OutputBudgetError(max_new_tokens, int(needed) if needed < INF else -1) if needed < INF \
                else InvalidRequestError("the constraint admits no output that ends", field="max_new_tokens")
    steering = _steering(constraint, sc)
    return lambda: BudgetMatcher(constraint, max_new_tokens, steering)


class BudgetMatcher(Matcher):
    """A Matcher whose masks also keep a valid ending within `budget` tokens of output."""

    def __init__(self, constraint: Constraint, budget: int, steering: "BudgetSteering"):
        super().__init__(constraint)
        self.budget = budget
        self.steering = steering

    @property
    def tokens_left(self) -> int:
        return self.budget - self.num_advanced

    def fill_bitmask(self, out_row: torch.Tensor) -> None:
        state = self.state
        if state is _FINISHED or not self.steering.steers(state, self.tokens_left):
            super().fill_bitmask(out_row)
            return
        out_row.copy_(self.steering.mask(state, self.tokens_left))

    def advance(self, token_id: int) -> bool:
        """False also for a token after which no valid ending fits (inside the window: a
        speculative draft ends there, a jump-forward retokenisation is not taken)."""
        state, left = self.state, self.tokens_left
        if not super().advance(token_id):
            return False
        if state is not _FINISHED and self.state is not _FINISHED and self.steering.steers(state, left) \
                and self.steering.sc.tokens_needed(self.state) > left - 1:
            self.rollback(1)
            return False
        return True


class BudgetSteering:
    """Per constraint: the masks filtered by tokens left (cached per state). Stored on the
    constraint, so it holds the constraint weakly: a strong reference back made a cycle, and
    every constraint a request had used then waited for the cyclic collector, its NFA's 10^4-10^5
    lists walked by every collection meanwhile (compile p99 116 -> 231 ms in the corpus
    benchmark once it set up each constraint's budget)."""

    def __init__(self, constraint: Constraint, sc: ShortestCompletion):
        self._constraint = weakref.ref(constraint)
        self.sc = sc
        self.table = constraint.table
        self._after: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def constraint(self) -> Constraint:
        return self._constraint()

    def steers(self, state, left: int) -> bool:
        sc = self.sc
        if sc.spelling.every_byte_is_a_token and sc.byte_distance(state) + 1 + STEER_WINDOW < left:
            return False
        return sc.tokens_needed(state) + STEER_WINDOW >= left

    def mask(self, state: int, left: int) -> torch.Tensor:
        """The constraint's mask at `state` less the tokens after which no ending fits in
        `left - 1` tokens; EOS where the state accepts."""
        ids, need = self.endings_after(state)
        keep = ids[: int(np.searchsorted(need, left - 1, side="right"))]
        nxt = self.sc.next_token(state)
        if nxt is not None and self.sc.tokens_needed(state) <= left and nxt not in keep:
            keep = np.append(keep, nxt)   # (a count lowered after the cached one was taken)
        words = pack(keep.astype(np.int64), self.table.words)
        if self.constraint.is_accepting(state) and len(self.table.eos_ids):
            pack(self.table.eos_ids, self.table.words, words)
        return torch.from_numpy(words)

    def endings_after(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """(allowed token ids, the tokens a valid ending needs after each), sorted by the latter."""
        with self._lock:
            got = self._after.get(state)
            if got is not None:
                self._after.move_to_end(state)
                return got
        allowed = unpack_bitmask(self.constraint.allowed_tokens(state), self.table.vocab_size)
        allowed[self.table.eos_ids] = False
        ids = np.flatnonzero(allowed)
        ends = self._end_states(state, ids)
        need = np.empty(len(ids), dtype=np.float64)
        for q in np.unique(ends).tolist():
            need[ends == q] = self.sc.tokens_needed(q) if q else INF
        order = np.argsort(need, kind="stable")
        got = (ids[order], need[order])
        with self._lock:
            self._after[state] = got
            if len(self._after) > MAX_CACHED_STATES:
                self._after.popitem(last=False)
        return got

    def _end_states(self, state: int, ids: np.ndarray) -> np.ndarray:
        """The DFA state after each token's bytes (0: dead), all tokens one byte column at a time."""
        data, lengths = padded_token_bytes(self.table)
        dfa = self.sc.dfa
        order = np.argsort(-lengths[ids], kind="stable")
        rows = ids[order]
        lens = lengths[rows]
        cur = np.full(len(rows), state, dtype=np.int64)
        for j in range(int(lens[0]) if len(lens) else 0):
            n = int(np.searchsorted(-lens, -j, side="left"))   # tokens longer than j bytes (sorted desc)
            if n == 0:
                break
            cls = dfa.class_of[data[rows[:n], j]].astype(np.int64)
            src = cur[:n]
            nxt = dfa.table[src, cls]
            missing = nxt < 0
            if missing.any():
                pairs = np.unique(np.stack([src[missing], cls[missing]]), axis=1)
                dfa.fill_pairs(pairs[0], pairs[1])
                nxt = dfa.table[src, cls]
            cur[:n] = nxt
        out = np.empty(len(ids), dtype=np.int64)
        out[order] = cur
        return out


_steer_lock = threading.Lock()


def _padded(table) -> tuple[np.ndarray, np.ndarray]:
    tb = table.token_bytes
    lengths = np.fromiter((len(b) for b in tb), dtype=np.int64, count=len(tb))
    data = np.zeros((len(tb), max(1, int(lengths.max()))), dtype=np.uint8)
    for i, b in enumerate(tb):
        if b:
            data[i, :len(b)] = np.frombuffer(b, dtype=np.uint8)
    return data, lengths


def padded_token_bytes(table) -> tuple[np.ndarray, np.ndarray]:
    """Every token's bytes as a zero-padded [vocab, longest] uint8 matrix, and the lengths."""
    return per_vocabulary(table, "padded bytes", _padded)


def _steering(constraint: Constraint, sc: ShortestCompletion) -> BudgetSteering:
    with _steer_lock:
        got = constraint.__dict__.get("_budget_steering")
        if got is None:
            got = constraint.__dict__["_budget_steering"] = BudgetSteering(constraint, sc)
        return got
