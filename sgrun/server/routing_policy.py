"""Which replica gets a request: cache-aware (as SGLang's router), round-robin or least-loaded.

Cache-aware: while the replicas are balanced, a request goes to the replica whose approximate
prefix tree matches the largest share of its prompt, if that share reaches `cache_threshold`;
below it, to the replica with the smallest tree (the one with the most cache room to spare).
When the load imbalance passes both thresholds (absolute: in-flight requests apart; relative:
max > rel * min), the least-loaded replica wins, whatever its cache, so one hot prefix cannot
pile every request onto one replica.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from sgrun.server.prefix_tree import PrefixTree

POLICIES = ("cache_aware", "round_robin", "least_load")


@dataclass(eq=False)
class Replica:
    url: str                                   # e.g. http://127.0.0.1:30001 (no trailing /v1)
    index: int
    healthy: bool = True
    in_flight: int = 0
    routed: int = 0                            # requests sent here, for /metrics
    tree: PrefixTree = field(default_factory=PrefixTree)
    last_error: str = ""


@dataclass
class RoutingPolicy:
    kind: str = "cache_aware"
    cache_threshold: float = 0.5
    balance_abs_threshold: int = 8
    balance_rel_threshold: float = 1.5
    _rr: itertools.count = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        if self.kind not in POLICIES:
            raise ValueError(f"unknown routing policy {self.kind!r}; choose one of {', '.join(POLICIES)}")

    def choose(self, replicas: list[Replica], key: str) -> Replica | None:
        """The replica for a request whose prompt text is `key`; None when none is healthy.
        Records the prompt in the chosen replica's tree."""
        live = [r for r in replicas if r.healthy]
        if not live:
            return None
        if self.kind == "round_robin":
            chosen = live[next(self._rr) % len(live)]
        elif self.kind == "least_load":
            chosen = min(live, key=lambda r: (r.in_flight, r.routed))
        else:
            chosen = self._cache_aware(live, key)
        if key:
            chosen.tree.insert(key)
        return chosen

    def _cache_aware(self, live: list[Replica], key: str) -> Replica:
        loads = [r.in_flight for r in live]
        hi, lo = max(loads), min(loads)
        if hi - lo > self.balance_abs_threshold and hi > self.balance_rel_threshold * lo:
            return min(live, key=lambda r: (r.in_flight, r.routed))
        if key:
            matched, _, _, best = max((r.tree.match(key), -r.in_flight, -r.index, r) for r in live)
            if matched / len(key) >= self.cache_threshold:
                return best
        return min(live, key=lambda r: (r.tree.size, r.in_flight))
