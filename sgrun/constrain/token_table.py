"""The model vocabulary as a column-major byte matrix, for stepping every token through an
automaton at once: tokens sorted by byte length (longest first), so the tokens still running at
byte position j are always a prefix of the order. Built once per tokenizer fingerprint."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np


@dataclass
class TokenTable:
    vocab_size: int                 # width of the logits / bitmask
    order: np.ndarray               # token ids of non-empty tokens, longest first
    lengths: np.ndarray             # byte length of order[k]
    columns: np.ndarray             # [max_len, n] uint8: byte j of token order[k] (0 past its end)
    count_longer: np.ndarray        # count_longer[j] = number of tokens with length > j
    token_bytes: list[bytes]        # per id; b"" for specials and ids past the vocab
    eos_ids: np.ndarray
    fingerprint: str

    @property
    def words(self) -> int:
        return (self.vocab_size + 31) // 32


_tables: dict[str, TokenTable] = {}
_lock = threading.Lock()


def token_table(tokenizer) -> TokenTable:
    fp = tokenizer.fingerprint
    with _lock:
        t = _tables.get(fp)
        if t is None:
            t = _build(tokenizer)
            _tables[fp] = t
        return t


def _build(tokenizer) -> TokenTable:
    specials = set(tokenizer.special_token_ids) | set(tokenizer.eos_token_ids)
    vocab_size = int(tokenizer.vocab_size)
    raw = list(tokenizer.token_bytes)[:vocab_size]
    tb = [b"" if (i in specials) else bytes(raw[i]) for i in range(len(raw))]
    tb += [b""] * (vocab_size - len(tb))
    lengths_all = np.fromiter((len(b) for b in tb), dtype=np.int64, count=len(tb))
    ids = np.nonzero(lengths_all > 0)[0]
    order = ids[np.argsort(-lengths_all[ids], kind="stable")]
    lengths = lengths_all[order]
    max_len = int(lengths[0]) if len(lengths) else 0
    flat = b"".join(tb[i].ljust(max_len, b"\0") for i in order.tolist())
    mat = np.frombuffer(flat, dtype=np.uint8).reshape(len(order), max_len)
    columns = np.ascontiguousarray(mat.T)
    count_longer = np.array([int((lengths > j).sum()) for j in range(max_len)], dtype=np.int64)
    eos = np.array(sorted(i for i in tokenizer.eos_token_ids if i < vocab_size), dtype=np.int64)
    return TokenTable(vocab_size, order.astype(np.int64), lengths, columns, count_longer, tb, eos,
                      tokenizer.fingerprint)
