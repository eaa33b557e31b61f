"""GET /v1/loads: the load report SGLang's gateway (smg) polls from every worker, in the shape
it reads (`{"timestamp", "dp_rank_count", "loads": [one snapshot]}`), so that smg's load-aware
policies (least_load, power_of_two, and cache_aware's balance and overload gates) see each
sgrun worker's queue, KV pressure and generation rate.

smg asks `/v1/loads?include=core,disagg,queues,memory` first and falls back to SGLang's
Prometheus gauge names; sgrun answers the first, so its own /metrics names stay as they are.

Two readings of KV usage (`sgrun serve --load-kv-usage`), docs/scale-out.md says when each fits:
  held  - pages held by requests; pages the radix cache could evict count as free (SGLang's
          meaning, the one smg's defaults are tuned for; a single `sgrun serve`'s default).
  cache - pages held by requests or kept by the radix cache: the share of the pool a new prompt
          cannot have without evicting a cached prefix, kept under 1.0 so that smg's overload
          protection (at 1.0 under `--dp`) never takes a pool full of reusable cache for an
          overloaded one. The same footprint, in tokens, is added to the queued prefill tokens:
          smg sends a prompt no worker holds to the lowest expected wait, (queued tokens + 1,024
          for each request it sent since its last poll) / throughput + 0.15 s * k / (1 - k), in
          which the KV term alone is too light to outweigh one request's since-poll work; with
          the footprint there, new conversations go to the replica with room for them.
          `sgrun serve --dp N` runs its replicas with it.
"""

from __future__ import annotations

import time
from collections import deque
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sgrun.server.state import ServerState

KV_USAGE_READINGS = ("held", "cache")
CACHE_USAGE_CEILING = 0.999   # smg clamps token_usage to 0.999 in its barrier too; 1.0 would read as overloaded
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


def load_snapshot(stats: dict[str, Any], max_running: int | None, gen_throughput: float,
                  kv_usage: str = "held") -> dict[str, Any]:
    """One engine's snapshot under smg's field names (engine.stats() keys: docs/interfaces.md).
    num_used_tokens is the KV held by requests (pages the radix cache could evict count as free,
    as SGLang counts them); token_usage is that share of the pool (kv_usage "held") or the share
    a new prompt cannot have without evicting cached prefixes (kv_usage "cache", which also adds
    that footprint in tokens to num_waiting_uncached_tokens; the module's docstring says why)."""
    page_size = stats.get("page_size", 1)
    pages_total = stats.get("pages_total", 0)
    total_tokens = pages_total * page_size
    used_tokens = stats.get("pages_in_use", 0) * page_size
    if not pages_total:
        usage = 0.0
    elif kv_usage == "cache":
        usage = min(CACHE_USAGE_CEILING, 1.0 - stats.get("pages_free", pages_total) / pages_total)
    else:
        usage = used_tokens / total_tokens
    waiting_tokens = stats.get("waiting_tokens", 0)
    if kv_usage == "cache":
        waiting_tokens += round((pages_total - stats.get("pages_free", pages_total)) * page_size)
    running, waiting = stats.get("running", 0), stats.get("waiting", 0)
    return {
        "dp_rank": 0,
        "num_running_reqs": running,
        "num_waiting_reqs": waiting,
        "num_waiting_uncached_tokens": waiting_tokens,
        "num_total_reqs": running + waiting,
        "num_used_tokens": used_tokens,
        "max_total_num_tokens": total_tokens,
        "token_usage": usage,
        "gen_throughput": gen_throughput,
        "cache_hit_rate": stats.get("cache_hit_rate", 0.0) or 0.0,
        "utilization": usage,
        "max_running_requests": max_running or 0,
    }


def load_report(state: ServerState, rate: GenerationRate, kv_usage: str = "held") -> dict[str, Any]:
    engine = state.engine
    stats = engine.stats()
    max_running = getattr(getattr(engine, "scheduler", None), "max_running", None)
    snapshot = load_snapshot(stats, max_running, rate.update(state.metrics.completion_tokens_total), kv_usage)
    return {"timestamp": datetime.now(timezone.utc).isoformat(), "dp_rank_count": 1, "loads": [snapshot]}
