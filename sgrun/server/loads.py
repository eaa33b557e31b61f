"""GET /v1/loads: the load report SGLang's gateway (smg) polls from every worker, in the shape
it reads (`{"timestamp", "dp_rank_count", "loads": [one snapshot]}`), so that smg's load-aware
policies (least_load, power_of_two, and cache_aware's balance and overload gates) see each
sgrun worker's queue, KV pressure and generation rate.

smg asks `/v1/loads?include=core,disagg,queues,memory` first and falls back to SGLang's
Prometheus gauge names; sgrun answers the first, so its own /metrics names stay as they are.
"""

from __future__ import annotations

import time
from collections import deque
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sgrun.server.state import ServerState

RATE_WINDOW_S = 30.0   # the generation rate is taken over the polls of the last 30 s (smg polls every 10 s)


class GenerationRate:
    """Output tokens per second between the oldest sample in the window and now."""

    def __init__(self, window_s: float = RATE_WINDOW_S):
        self.window_s = window_s
        self.samples: deque[tuple[float, int]] = deque()

    def update(self, total_tokens: int, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self.samples.append((now, total_tokens))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window_s:
            self.samples.popleft()
        t0, n0 = self.samples[0]
        return (total_tokens - n0) / (now - t0) if now > t0 else 0.0


def load_snapshot(stats: dict[str, Any], max_running: int | None, gen_throughput: float) -> dict[str, Any]:
    """One engine's snapshot under smg's field names (engine.stats() keys: docs/interfaces.md).
    token_usage is the share of KV pages held by requests; pages the radix cache could evict
    on demand count as free, as SGLang counts them."""
    page_size = stats.get("page_size", 1)
    total_tokens = stats.get("pages_total", 0) * page_size
    used_tokens = stats.get("pages_in_use", 0) * page_size
    usage = used_tokens / total_tokens if total_tokens else 0.0
    running, waiting = stats.get("running", 0), stats.get("waiting", 0)
    return {
        "dp_rank": 0,
        "num_running_reqs": running,
        "num_waiting_reqs": waiting,
        "num_waiting_uncached_tokens": stats.get("waiting_tokens", 0),
        "num_total_reqs": running + waiting,
        "num_used_tokens": used_tokens,
        "max_total_num_tokens": total_tokens,
        "token_usage": usage,
        "gen_throughput": gen_throughput,
        "cache_hit_rate": stats.get("cache_hit_rate", 0.0) or 0.0,
        "utilization": usage,
        "max_running_requests": max_running or 0,
    }


def load_report(state: ServerState, rate: GenerationRate) -> dict[str, Any]:
    engine = state.engine
    stats = engine.stats()
    max_running = getattr(getattr(engine, "scheduler", None), "max_running", None)
    snapshot = load_snapshot(stats, max_running, rate.update(state.metrics.completion_tokens_total))
    return {"timestamp": datetime.now(timezone.utc).isoformat(), "dp_rank_count": 1, "loads": [snapshot]}
