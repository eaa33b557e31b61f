"""Shared helpers for the constraint tests: the default model's tokenizer (loaded once per
process) and a canonical JSON serializer matching the compiler's output form."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("SGRUN_CACHE", "/tmp/sgcache")

# The vendored copy (tests/data/json-schema-test-suite/README.md): a fresh clone needs nothing
# outside the repository. SGRUN_SUITE_DIR points the suite test at another copy (a newer suite).
SUITE_DIR = (Path(os.environ["SGRUN_SUITE_DIR"]) if os.environ.get("SGRUN_SUITE_DIR")
             else Path(__file__).resolve().parent / "data/json-schema-test-suite/draft2020-12")


@lru_cache(maxsize=1)
def load_default_tokenizer():
    from sgrun.models.loader import load_tokenizer
    tok = load_tokenizer(None)
    tok.token_bytes  # noqa: B018 - warm the cached property
    return tok


@pytest.fixture(scope="session")
def constrain_tok():
    return load_default_tokenizer()


def _canon_numbers(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e300:
        return int(v)
    if isinstance(v, list):
        return [_canon_numbers(x) for x in v]
    if isinstance(v, dict):
        return {k: _canon_numbers(x) for k, x in v.items()}
    return v


class SchemaOrder:
    """Reorders instance keys the way the compiler emits them: the keys the governing schemas
    list under `properties` first (schema order), then the others in their original order."""

    def __init__(self, root: Any):
        from sgrun.constrain.schema_refs import SchemaIndex
        self.index = SchemaIndex(root)
        self.root = root

    def _expand(self, schema: Any, base: str, depth: int = 0) -> list[tuple[dict, str]]:
        if not isinstance(schema, dict) or depth > 20:
            return []
        base = self.index.base_for(schema, base)
        out = [(schema, base)]
        if isinstance(schema.get("$ref"), str):
            try:
                target, _, tbase = self.index.resolve(schema["$ref"], base, "#")
                out += self._expand(target, tbase, depth + 1)
            except Exception:
                pass
        for key in ("allOf", "anyOf", "oneOf"):
            for sub in schema.get(key, []) if isinstance(schema.get(key), list) else []:
                out += self._expand(sub, base, depth + 1)
        return out

    def serialize(self, value: Any) -> str:
        return json.dumps(self._order(_canon_numbers(value), [(self.root, "https://sgrun.invalid/root.json")]),
                          separators=(",", ":"), ensure_ascii=False)

    def _order(self, value: Any, schemas: list[tuple[Any, str]]) -> Any:
        flat = [x for s, b in schemas for x in self._expand(s, b)]
        if isinstance(value, dict):
            declared: list[str] = []
            for s, _ in flat:
                props = s.get("properties")
                if isinstance(props, dict):
                    declared += [k for k in props if k not in declared]
            keys = [k for k in declared if k in value] + [k for k in value if k not in declared]
            out = {}
            for k in keys:
                child = []
                for s, b in flat:
                    props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
                    if k in props:
                        child.append((props[k], b))
                    for p, sub in (s.get("patternProperties") or {}).items():
                        child.append((sub, b))
                    if isinstance(s.get("additionalProperties"), dict):
                        child.append((s["additionalProperties"], b))
                out[k] = self._order(value[k], child)
            return out
        if isinstance(value, list):
            out_list = []
            for i, v in enumerate(value):
                child = []
                for s, b in flat:
                    pre = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else (
                        s.get("items") if isinstance(s.get("items"), list) else [])
                    if i < len(pre):
                        child.append((pre[i], b))
                    elif isinstance(s.get("items"), dict):
                        child.append((s["items"], b))
                out_list.append(self._order(v, child))
            return out_list
        return value


def shortest_completion(constraint, state: int, max_states: int = 20000) -> bytes | None:
    """Shortest byte string leading from `state` to acceptance (BFS over the lazy automaton)."""
    from collections import deque
    dfa = constraint.dfa
    if dfa.accepting[state]:
        return b""

    def depth(sid: int) -> int:
        sets = getattr(dfa, "_sets", None)
        if sets is None:  # grammar automaton: parser stack height
            st = dfa.state(sid)
            return len(st[0]) if st else 0
        return min(((stk[1] if stk else 0) for _, stk in sets[sid]), default=0)

    # never open much deeper nesting than needed: keeps the search finite
    limit = depth(state) + (2 if hasattr(dfa, "_sets") else 6)
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
