"""The model vocabulary as a token trie laid out level by level in flat numpy arrays, so one
automaton state's token mask is a breadth-first walk where every step handles all live trie
nodes of a depth at once (whole subtrees die with their parent). Built once per tokenizer."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np


@dataclass
class TokenTable:
    vocab_size: int              # width of the logits / bitmask
    token_bytes: list[bytes]     # per id; b"" for specials and ids past the vocab
    eos_ids: np.ndarray
    fingerprint: str
    # trie: nodes are non-empty byte prefixes of tokens, numbered depth by depth; the children of
    # a node are contiguous (child_start..child_end) in the next depth.
    node_byte: np.ndarray        # [num_nodes] uint8, the last byte of the node's prefix
    child_start: np.ndarray      # [num_nodes] int64
    child_end: np.ndarray        # [num_nodes] int64
    depth1: np.ndarray           # node ids of depth 1 (single-byte prefixes)
    token_ids: np.ndarray        # non-empty token ids
    token_node: np.ndarray       # trie node of each token in token_ids

    @property
    def words(self) -> int:
        return (self.vocab_size + 31) // 32

    @property
    def num_nodes(self) -> int:
        return len(self.node_byte)


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
    tb = [b"" if i in specials else bytes(raw[i]) for i in range(len(raw))]
    tb += [b""] * (vocab_size - len(tb))
    # Level-by-level numbering: sort prefixes by (length, bytes) so siblings are contiguous and
    # ordered like their parents.
    prefixes: set[bytes] = set()
    for b in tb:
        for i in range(1, len(b) + 1):
            prefixes.add(b[:i])
    ordered = sorted(prefixes, key=lambda p: (len(p), p))
    node_of = {p: k for k, p in enumerate(ordered)}
    n = len(ordered)
    node_byte = np.fromiter((p[-1] for p in ordered), dtype=np.uint8, count=n)
    child_start = np.zeros(n, dtype=np.int64)
    child_end = np.zeros(n, dtype=np.int64)
    for k, p in enumerate(ordered):
        if len(p) > 1:
            par = node_of[p[:-1]]
            if child_end[par] == 0:
                child_start[par] = k
            child_end[par] = k + 1
    depth1 = np.array([node_of[p] for p in ordered if len(p) == 1], dtype=np.int64)
    ids = [i for i, b in enumerate(tb) if b]
    token_ids = np.array(ids, dtype=np.int64)
    token_node = np.array([node_of[tb[i]] for i in ids], dtype=np.int64)
    eos = np.array(sorted(i for i in tokenizer.eos_token_ids if i < vocab_size), dtype=np.int64)
    return TokenTable(vocab_size, tb, eos, tokenizer.fingerprint, node_byte, child_start, child_end,
                      depth1, token_ids, token_node)
