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


@dataclass
class SubTrie:
    """A trie over a subset of tokens, laid out like TokenTable's (for the numpy walk).

    Level-by-level numbering: prefixes sorted by (length, bytes), so siblings are contiguous and
    ordered like their parents."""
    node_byte: np.ndarray
    child_start: np.ndarray
    child_end: np.ndarray
    depth1: np.ndarray
    token_ids: np.ndarray
    token_node: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.node_byte)


def build_trie(token_bytes: list[bytes], ids: list[int]) -> SubTrie:
    prefixes: set[bytes] = set()
    for i in ids:
        b = token_bytes[i]
        for k in range(1, len(b) + 1):
            prefixes.add(b[:k])
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
    return SubTrie(node_byte, child_start, child_end, depth1, np.array(ids, dtype=np.int64),
                   np.array([node_of[token_bytes[i]] for i in ids], dtype=np.int64))


_tables: dict[str, TokenTable] = {}
_lock = threading.Lock()


def token_table(tokenizer) -> TokenTable:
    fp = tokenizer.fingerprint
    with _lock:
        t = _tables.get(fp)
        if t is None:
            t = _build(tokenizer)
            _tables[fp] = t
            freeze_long_lived()
        return t


def _build(tokenizer) -> TokenTable:
    specials = set(tokenizer.special_token_ids) | set(tokenizer.eos_token_ids)
    vocab_size = int(tokenizer.vocab_size)
    raw = list(tokenizer.token_bytes)[:vocab_size]
    tb = [b"" if i in specials else bytes(raw[i]) for i in range(len(raw))]
    tb += [b""] * (vocab_size - len(tb))
    ids = [i for i, b in enumerate(tb) if b]
    trie = build_trie(tb, ids)
    eos = np.array(sorted(i for i in tokenizer.eos_token_ids if i < vocab_size), dtype=np.int64)
    return TokenTable(vocab_size, tb, eos, tokenizer.fingerprint, trie.node_byte, trie.child_start,
                      trie.child_end, trie.depth1, trie.token_ids, trie.token_node)


def freeze_long_lived() -> None:
    """Move everything alive now (the vocabulary tables, the tokenizer, the model's objects) out
    of the cyclic garbage collector's reach (gc.freeze). They live as long as the process, and a
    full collection would otherwise walk them all: measured 0.25-0.8 s pauses of every thread
    during constraint compiles, which allocate enough to trigger full collections."""
    import gc
    gc.freeze()
