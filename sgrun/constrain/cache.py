"""Bounded LRU cache of compiled constraints, keyed by (kind, canonical spec, options,
tokenizer fingerprint). Concurrent compiles of the same key wait for the first one. Refusals
(ConstraintError) are remembered too, so a client resending a hostile constraint gets the same
400 at once instead of spending the compile budget again."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable

from sgrun.constrain.constraint import Constraint
from sgrun.errors import ConstraintError

DEFAULT_CACHE_SIZE = 256


class ConstraintCache:
    def __init__(self, max_entries: int = DEFAULT_CACHE_SIZE):
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, Constraint] = OrderedDict()
        self._inflight: dict[Hashable, threading.Event] = {}
        self._refused: OrderedDict[Hashable, ConstraintError] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_compile(self, key: Hashable, build: Callable[[], Constraint], refusal_key: Hashable = None) -> Constraint:
        """refusal_key: what else a remembered refusal depends on (the compile budget: a larger
        budget may succeed where a smaller one ran out)."""
        while True:
            with self._lock:
                c = self._entries.get(key)
                if c is not None and c.exhausted:   # full of other requests' states: start afresh
                    del self._entries[key]
                    c = None
                if c is not None:
                    self._entries.move_to_end(key)
                    self.hits += 1
                    return c
                refused = self._refused.get((key, refusal_key))
                if refused is not None:
                    self.hits += 1
                    raise refused.with_traceback(None)
                waiter = self._inflight.get(key)
                if waiter is None:
                    waiter = threading.Event()
                    self._inflight[key] = waiter
                    self.misses += 1
                    break
            waiter.wait()  # another thread compiles this key; then re-check (it may have failed)
        try:
            try:
                c = build()
            except ConstraintError as e:
                with self._lock:
                    self._refused[(key, refusal_key)] = e
                    while len(self._refused) > self.max_entries:
                        self._refused.popitem(last=False)
                raise
            with self._lock:
                self._entries[key] = c
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            return c
        finally:
            with self._lock:
                self._inflight.pop(key, None)
            waiter.set()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._refused.clear()

    def __len__(self) -> int:
        return len(self._entries)


GLOBAL_CACHE = ConstraintCache()
