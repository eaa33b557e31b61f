"""The compiled-constraint interface the engine codes against, and the per-request Matcher.

A Constraint is immutable from the outside (its internal caches grow lazily); all request state
lives in a Matcher: a stack of automaton states, one per accepted token, so rollback is a pop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Hashable

import torch

from sgrun.constrain.token_table import TokenTable

_FINISHED = ("<eos>",)  # state after an accepted EOS token
_MAX_FORCED_BYTES = 1024


class Constraint(ABC):
    kind: str
    spec: str
    table: TokenTable
    warnings: list[str] = []  # what the compile loosened or kept as annotation (set per instance)

    @property
    def exhausted(self) -> bool:
        """True once the lazily built automaton, shared by every request of this constraint, hit
        its state cap. States pile up across requests on a long-running server; the cache then
        compiles a fresh one instead of failing every later request (cache.py)."""
        return False

    @property
    @abstractmethod
    def initial_state(self) -> Hashable: ...

    @abstractmethod
    def allowed_tokens(self, state: Hashable) -> torch.Tensor:
        """Packed int32 bitmask [ceil(vocab/32)] of tokens allowed in `state` (EOS included
        exactly when accepting). Cached: do not modify the returned tensor."""

    @abstractmethod
    def step_bytes(self, state: Hashable, data: bytes) -> Hashable | None:
        """State after consuming `data`, or None if it leaves the language."""

    @abstractmethod
    def is_accepting(self, state: Hashable) -> bool: ...

    @abstractmethod
    def can_continue(self, state: Hashable) -> bool:
        """Whether any non-empty continuation is possible."""

    @abstractmethod
    def forced_bytes(self, state: Hashable) -> bytes:
        """Bytes every continuation from `state` must start with (b"" if none)."""

    # --- derived ------------------------------------------------------------------------
    def advance(self, state: Hashable, token_id: int) -> Hashable | None:
        if state is _FINISHED:
            return None
        if token_id in self._eos_set:
            return _FINISHED if self.is_accepting(state) else None
        if not (0 <= token_id < len(self.table.token_bytes)):
            return None
        data = self.table.token_bytes[token_id]
        if not data:  # special tokens are never allowed inside a constraint
            return None
        return self.step_bytes(state, data)

    @property
    def _eos_set(self) -> frozenset[int]:
        s = self.__dict__.get("_eos_cache")
        if s is None:
            s = frozenset(self.table.eos_ids.tolist())
            self.__dict__["_eos_cache"] = s
        return s

    def matches(self, text: str, tokenizer=None) -> bool:
        """Walk the tokenizer's encoding of `text` through the automaton; True if it ends accepting."""
        ids = self._encode(text)
        state: Hashable | None = self.initial_state
        for t in ids:
            state = self.advance(state, t)
            if state is None:
                return False
        return self.is_accepting(state)

    def matches_bytes(self, data: bytes) -> bool:
        """Whether `data` (no token boundaries) is a complete output: the language check the
        constraint tests, the soundness property test and the tool-call tests use."""
        state = self.step_bytes(self.initial_state, data)
        return state is not None and self.is_accepting(state)

    def _encode(self, text: str) -> list[int]:
        enc = self.__dict__.get("_encoder")
        if enc is None:
            raise RuntimeError("constraint has no tokenizer attached")
        return enc(text)

    def attach_tokenizer(self, tokenizer) -> None:
        self.__dict__["_encoder"] = lambda text: tokenizer.encode(text, add_bos=False)

    def matcher(self) -> "Matcher":
        return Matcher(self)


class Matcher:
    """Per-request constraint state (engine-thread only)."""

    def __init__(self, constraint: Constraint):
        self.constraint = constraint
        self._states: list[Hashable] = [constraint.initial_state]

    @property
    def state(self) -> Hashable:
        return self._states[-1]

    def fill_bitmask(self, out_row: torch.Tensor) -> None:
        state = self._states[-1]
        if state is _FINISHED:
            from sgrun.constrain.bitmask import pack_token_ids
            table = self.constraint.table
            out_row.copy_(pack_token_ids(table.eos_ids, table.vocab_size))
            return
        out_row.copy_(self.constraint.allowed_tokens(state))

    def allowed_token_ids(self) -> torch.Tensor:
        from sgrun.constrain.bitmask import unpack_bitmask
        row = torch.zeros(self.constraint.table.words, dtype=torch.int32)
        self.fill_bitmask(row)
        return torch.from_numpy(unpack_bitmask(row, self.constraint.table.vocab_size).nonzero()[0])

    def advance(self, token_id: int) -> bool:
        nxt = self.constraint.advance(self._states[-1], int(token_id))
        if nxt is None:
            return False
        self._states.append(nxt)
        return True

    def advance_text(self, text: str) -> bool:
        """Consume raw text (no token boundary); used by tests and jump-forward fallbacks."""
        state = self._states[-1]
        if state is _FINISHED:
            return False
        nxt = self.constraint.step_bytes(state, text.encode("utf-8"))
        if nxt is None:
            return False
        self._states.append(nxt)
        return True

    def is_accepting(self) -> bool:
        s = self._states[-1]
        return s is _FINISHED or self.constraint.is_accepting(s)

    def is_terminated(self) -> bool:
        s = self._states[-1]
        return s is _FINISHED or (self.constraint.is_accepting(s) and not self.constraint.can_continue(s))

    def forced_text(self) -> str:
        s = self._states[-1]
        if s is _FINISHED:
            return ""
        return complete_utf8_prefix(self.constraint.forced_bytes(s))

    def rollback(self, num_tokens: int) -> None:
        if num_tokens < 0 or num_tokens > len(self._states) - 1:
            raise ValueError(f"cannot roll back {num_tokens} tokens; {len(self._states) - 1} were advanced")
        if num_tokens:
            del self._states[-num_tokens:]

    @property
    def num_advanced(self) -> int:
        return len(self._states) - 1


def complete_utf8_prefix(data: bytes) -> str:
    """Longest prefix of `data` that is complete UTF-8 text ("" if it starts mid-character)."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""


MAX_FORCED_BYTES = _MAX_FORCED_BYTES
