"""Per-tokenizer indexes over the vocabulary trie that make cold token masks cheap (built once
per tokenizer, shared by every compiled constraint):

- the trie as Python lists and a (node, byte) -> child dict, for a pure-Python walk of states where only a few
  bytes are allowed (keys, literals, numbers, punctuation): it touches a few dozen trie nodes
  instead of stepping numpy arrays over every depth.
- "text" tokens: those made only of printable ASCII other than `"` and `\\` (about 47k of 49k in
  SmolLM2). Where every such byte moves the automaton to the same next state for as long as a
  token can be (a string body, free text), a text token's fate depends only on its length, so
  the text part of the mask is one precomputed bitmask `text_upto[r]` (text tokens of length <= r).
- the other ("special") tokens in their own small trie, walked exactly.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from sgrun.constrain.token_table import SubTrie, TokenTable, build_trie, freeze_long_lived

TEXT_BYTES = frozenset(b for b in range(0x20, 0x7F) if b not in (0x22, 0x5C))


class TokenBits:
    """Sets the bits of a fixed token subset in a packed mask from one boolean per token, with a
    handful of numpy calls (np.bitwise_or.at is slow for hundreds of ids)."""

    def __init__(self, ids: np.ndarray):
        order = np.argsort(ids, kind="stable")
        self.order = order
        sorted_ids = ids[order]
        words = sorted_ids >> 5
        self.bits = np.left_shift(np.uint32(1), (sorted_ids & 31).astype(np.uint32))
        self.starts = np.flatnonzero(np.r_[True, words[1:] != words[:-1]]) if len(words) else np.zeros(0, np.int64)
        self.words = words[self.starts]

    def set(self, flags: np.ndarray, out: np.ndarray) -> None:
        if not len(self.starts):
            return
        contrib = np.where(flags[self.order], self.bits, np.uint32(0))
        out.view(np.uint32)[self.words] |= np.bitwise_or.reduceat(contrib, self.starts)


@dataclass
class VocabIndex:
    root_kids: list[int]                 # byte -> depth-1 node (-1 if none)
    kids: dict[int, int]                 # node << 8 | byte -> child node
    node_byte: list[int]                 # TokenTable's trie as Python lists (no numpy per step)
    child_start: list[int]
    child_end: list[int]
    node_token: list[int]                # node -> token id ending there (-1 if none)
    text_upto: np.ndarray                # [max_text_len + 1, words] int32: text tokens of length <= r
    max_text_len: int
    special: SubTrie                     # non-text tokens
    special_bits: TokenBits              # packs a walk of `special`
    special_has_quote: np.ndarray        # per special token: holds a `"` (leaves a JSON string)
    # all tokens sorted by bytes, so the tokens under a trie node are one contiguous range
    sorted_bytes: list[bytes]
    sorted_ids: np.ndarray
    sorted_len: np.ndarray
    sorted_tail: np.ndarray              # start of the all-text suffix (len if the last byte is not text)
    # text tokens by first byte (for masks decided per first byte)
    text_ids: np.ndarray
    text_first: np.ndarray
    text_len: np.ndarray
    parent: list[int]                    # node -> parent node (-1 at depth 1)

    def node_prefix(self, node: int) -> bytes:
        """The bytes from the trie root to `node`."""
        out = []
        while node >= 0:
            out.append(self.node_byte[node])
            node = self.parent[node]
        return bytes(reversed(out))

    def subtree_size(self, node: int) -> int:
        """How many tokens start with `node`'s prefix."""
        lo, hi = self.prefix_range(self.node_prefix(node))
        return hi - lo

    def prefix_range(self, prefix: bytes) -> tuple[int, int]:
        """[lo, hi) of the sorted tokens that start with `prefix`."""
        sb = self.sorted_bytes
        lo = bisect_left(sb, prefix)
        end = prefix.rstrip(b"\xff")
        hi = len(sb) if not end else bisect_left(sb, end[:-1] + bytes([end[-1] + 1]), lo)
        return lo, hi


def _build(t: TokenTable) -> VocabIndex:
    n = t.num_nodes
    node_byte = t.node_byte.tolist()
    # children ranges follow their parents' order, so deeper nodes in order have these parents
    counts = t.child_end - t.child_start
    counts[counts < 0] = 0
    parent = np.repeat(np.arange(n, dtype=np.int64), counts)
    deeper = np.arange(len(t.depth1), len(t.depth1) + len(parent), dtype=np.int64)
    kids = dict(zip(((parent << 8) | t.node_byte[deeper]).tolist(), deeper.tolist()))
    parents = np.full(n, -1, dtype=np.int64)
    parents[deeper] = parent
    root_kids = [-1] * 256
    for d in t.depth1.tolist():
        root_kids[node_byte[d]] = d
    tok_of_node = np.full(n, -1, dtype=np.int64)
    tok_of_node[t.token_node] = t.token_ids
    node_token = tok_of_node.tolist()
    text_ids, special_ids = [], []
    for tid in t.token_ids.tolist():
        b = t.token_bytes[tid]
        (text_ids if all(x in TEXT_BYTES for x in b) else special_ids).append(tid)
    lengths = np.array([len(t.token_bytes[i]) for i in text_ids], dtype=np.int64)
    max_len = int(lengths.max()) if len(lengths) else 0
    words = t.words
    text_upto = np.zeros((max_len + 1, words), dtype=np.int32)
    ids_arr = np.array(text_ids, dtype=np.int64)
    bits = np.zeros(words * 32, dtype=np.bool_)
    for r in range(1, max_len + 1):
        bits[ids_arr[lengths == r]] = True
        text_upto[r] = np.packbits(bits, bitorder="little").view("<i4")
    special = build_trie(t.token_bytes, special_ids)
    order = sorted(t.token_ids.tolist(), key=lambda i: t.token_bytes[i])
    sorted_bytes = [t.token_bytes[i] for i in order]
    tails = []
    for b in sorted_bytes:
        k = len(b)
        while k and b[k - 1] in TEXT_BYTES:
            k -= 1
        tails.append(k)
    text_arr = np.array(text_ids, dtype=np.int64)
    return VocabIndex(root_kids, kids, node_byte, t.child_start.tolist(), t.child_end.tolist(), node_token,
                      text_upto, max_len, special,
                      TokenBits(special.token_ids),
                      np.array([b'"' in t.token_bytes[i] for i in special.token_ids.tolist()], dtype=np.bool_),
                      sorted_bytes, np.array(order, dtype=np.int64),
                      np.array([len(b) for b in sorted_bytes], dtype=np.int64), np.array(tails, dtype=np.int64),
                      text_arr, np.array([t.token_bytes[i][0] for i in text_ids], dtype=np.int64), lengths,
                      parents.tolist())


_indexes: dict[str, VocabIndex] = {}
_lock = threading.Lock()


def vocab_index(table: TokenTable) -> VocabIndex:
    with _lock:
        got = _indexes.get(table.fingerprint)
        if got is None:
            got = _build(table)
            _indexes[table.fingerprint] = got
            freeze_long_lived()
        return got
