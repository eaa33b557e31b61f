"""Spelling a byte string in the fewest vocabulary tokens (the token count of a constraint's
shortest ending, shortest_completion.py), and the per-vocabulary memo such tables live in."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from sgrun.constrain.token_table import TokenTable


@dataclass(frozen=True)
class VocabSpelling:
    """The non-special tokens by their bytes, and every prefix of one (to stop extending early)."""
    by_bytes: dict[bytes, int]
    prefixes: frozenset[bytes]
    every_byte_is_a_token: bool

    def fewest_tokens(self, data: bytes) -> list[int]:
        """The shortest list of tokens whose bytes concatenate to `data` ([] if none spells it)."""
        n = len(data)
        best = [0] + [n + 1] * n
        back: list[tuple[int, int]] = [(0, -1)] * (n + 1)
        for i in range(n):
            if best[i] > n:
                continue
            j = i + 1
            while j <= n:
                piece = data[i:j]
                if piece not in self.prefixes:
                    break
                tok = self.by_bytes.get(piece)
                if tok is not None and best[i] + 1 < best[j]:
                    best[j] = best[i] + 1
                    back[j] = (i, tok)
                j += 1
        if best[n] > n:
            return []
        out = []
        j = n
        while j > 0:
            i, tok = back[j]
            out.append(tok)
            j = i
        return out[::-1]


_per_vocabulary: dict[tuple[str, str], Any] = {}
_vocab_lock = threading.Lock()


def per_vocabulary(table: TokenTable, what: str, build: Callable[[TokenTable], Any]) -> Any:
    """build(table), once per vocabulary (fingerprint) and `what`."""
    with _vocab_lock:
        key = (table.fingerprint, what)
        got = _per_vocabulary.get(key)
        if got is None:
            got = _per_vocabulary[key] = build(table)
        return got


def _spelling(table: TokenTable) -> VocabSpelling:
    by_bytes: dict[bytes, int] = {}
    prefixes: set[bytes] = set()
    for tid, b in enumerate(table.token_bytes):
        if b and b not in by_bytes:
            by_bytes[b] = tid
            for k in range(1, len(b) + 1):
                prefixes.add(b[:k])
    return VocabSpelling(by_bytes, frozenset(prefixes), all(bytes([x]) in by_bytes for x in range(256)))


def vocab_spelling(table: TokenTable) -> VocabSpelling:
    return per_vocabulary(table, "spelling", _spelling)
