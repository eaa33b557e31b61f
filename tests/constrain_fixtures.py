"""Shared helpers for the constraint tests: the default model's tokenizer (loaded once per
process) and a canonical JSON serializer matching the compiler's output form."""

from __future__ import annotations

import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest

os.environ.setdefault("SGRUN_CACHE", os.path.join(tempfile.gettempdir(), "sgcache"))

# The vendored copy (tests/data/json-schema-test-suite/README.md): a fresh clone needs nothing
# outside the repository. SGRUN_SUITE_DIR points the suite test at another copy (a newer suite).
SUITE_DIR = (Path(os.environ["SGRUN_SUITE_DIR"]) if os.environ.get("SGRUN_SUITE_DIR")
             else Path(__file__).resolve().parent / "data/json-schema-test-suite/draft2020-12")


sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from schema_order import SchemaOrder  # noqa: E402,F401  (re-exported for the tests)


@lru_cache(maxsize=1)
def load_default_tokenizer():
    from sgrun.models.loader import load_tokenizer
    tok = load_tokenizer(None)
    tok.token_bytes  # noqa: B018 - warm the cached property
    return tok


@pytest.fixture(scope="session")
def constrain_tok():
    return load_default_tokenizer()


def shortest_completion(constraint, state: int, max_states: int = 20000) -> bytes | None:
    """Shortest byte string leading from `state` to acceptance.

    Over a ByteNFA's lazy DFA: the budget's witness (constrain/shortest_completion.py: NFA
    distances, then one byte at a time to a state one byte closer), which never enumerates the
    automaton. A breadth-first search of the lazy automaton, as this helper did before, can
    exhaust any state cap: from inside a free key of an open object every distinct byte class
    is a new state (a drawn schema needed ~200,000 states, the automaton's own cap). The
    callers check what it returns by advancing their matcher over it and validating the whole
    output, so the witness is held to the constraint here too. Grammar automata (Earley) keep
    the BFS."""
    from sgrun.constrain.shortest_completion import shortest_completion as production
    dfa = constraint.dfa
    if dfa.accepting[state]:
        return b""
    sc = production(constraint)
    if sc is not None:
        if sc.byte_distance(state) == float("inf"):
            return None
        return sc.witness(state)[0]
    return _shortest_by_search(constraint, state, max_states)


def _shortest_by_search(constraint, state: int, max_states: int) -> bytes | None:
    """Breadth-first over the automaton's states, nesting at most a few levels deeper."""
    from collections import deque
    dfa = constraint.dfa

    def depth(sid: int) -> int:
        sets = getattr(dfa, "_sets", None)
        if sets is None:  # grammar automaton: parser stack height
            st = dfa.state(sid)
            return len(st[0]) if st else 0
        return min(((stk[1] if stk else 0) for _, stk in sets[sid]), default=0)

    # never open much deeper nesting than needed: keeps the search finite. (+2 was too tight for
    # automata: a pattern string under a property value opens three frames at once -- the value,
    # the string, its counted repeat -- so `{"name":"` sat at depth 4 from a key at depth 1.)
    limit = depth(state) + 6
    prev = {state: None}
    q = deque([state])
    while q and len(prev) < max_states:
        s = q.popleft()
        row = dfa.row(s)
        for cls in range(dfa.num_classes):
            t = int(row[cls])
            if t == 0 or t in prev or depth(t) > limit:
                continue
            prev[t] = (s, dfa.class_rep[cls])
            if dfa.accepting[t]:
                out = bytearray()
                while prev[t] is not None:
                    t, b = prev[t]
                    out.append(b)
                return bytes(reversed(out))
            q.append(t)
    return None


def byte_token_ids(tok) -> dict[int, int]:
    ids: dict[int, int] = {}
    for i, b in enumerate(tok.token_bytes):
        if len(b) == 1 and i not in tok.special_token_ids:
            ids.setdefault(b[0], i)
    return ids


def random_walk(constraint, tok, rng, max_tokens: int = 40, stop_prob: float = 0.3) -> tuple[bytes, list[int]]:
    """A random 'model': sample allowed tokens (checking the mask against advance), then finish
    with the shortest completion in single-byte tokens. Returns (output bytes, token ids)."""
    import numpy as np
    m = constraint.matcher()
    out: list[int] = []
    eos = set(tok.eos_token_ids)
    for _ in range(max_tokens):
        ids = constraint.allowed_token_ids(m.state) if hasattr(constraint, "allowed_token_ids") else None
        if m.is_accepting() and rng.random() < stop_prob:
            break
        if ids is None or len(ids) == 0:
            break
        # half the time prefer short tokens, which keeps strings/numbers from running away
        if rng.random() < 0.5:
            lens = np.array([len(tok.token_bytes[i]) for i in ids])
            short = ids[lens <= 2]
            if len(short):
                ids = short
        t = int(ids[rng.randrange(len(ids))])
        assert t not in eos
        assert m.advance(t), "a token from the mask was refused by advance()"
        out.append(t)
    tail = shortest_completion(constraint, m.state)
    assert tail is not None, "no completion found"
    singles = byte_token_ids(tok)
    for b in tail:
        assert m.advance(singles[b])
        out.append(singles[b])
    assert m.is_accepting()
    assert any(m.advance(e) for e in eos) if eos else True
    data = b"".join(tok.token_bytes[i] for i in out)
    return data, out
