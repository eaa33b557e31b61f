"""Prometheus metrics for one server app, in a registry of its own (so several apps in one
process, as in tests, never collide). Engine-side figures are read from engine.stats() at
scrape time."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST

from sgrun.constrain import GLOBAL_CACHE

if TYPE_CHECKING:
    from sgrun.engine.engine import Engine

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST
RECENT_REQUESTS = 50   # finished requests whose TTFT/TPOT the web page's engine view summarises


class ServerMetrics:
    def __init__(self, engine: Engine | None = None):
        self.engine = engine
        self._recent: deque[tuple[float | None, float | None]] = deque(maxlen=RECENT_REQUESTS)
        self.completion_tokens_total = 0      # read by /v1/loads for the generation rate (loads.py)
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("sgrun_requests", "Finished requests by endpoint kind and outcome",
                                ["kind", "status"], registry=r)
        self.prompt_tokens = Counter("sgrun_prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.completion_tokens = Counter("sgrun_completion_tokens", "Generated tokens", registry=r)
        self.ttft = Histogram("sgrun_time_to_first_token_seconds", "Time from arrival to first output token",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("sgrun_time_per_output_token_seconds", "Mean time between output tokens after the first",
                              buckets=_TPOT_BUCKETS, registry=r)
        self.e2e = Histogram("sgrun_request_latency_seconds", "Time from arrival to the last token",
                             buckets=_LATENCY_BUCKETS, registry=r)
        self.errors = Counter("sgrun_errors", "Requests refused or failed, by error type and HTTP status",
                              ["type", "status"], registry=r)
        self.constraint_compile = Histogram(
            "sgrun_constraint_compile_seconds",
            "Time to compile (or fetch from cache) a constrained request's automaton",
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0), registry=r)
        self.constraint_refusals = Counter("sgrun_constraint_refusals", "Constraints refused at compile time, by kind",
                                           ["kind"], registry=r)
        self.aborts = Gauge("sgrun_aborted_requests_total", "Requests the engine ended early, by cause: "
                            "client_disconnect (the caller aborted it: client gone, /abort_request), error (it "
                            "failed alone in the engine), engine (engine failure or shutdown)", ["cause"], registry=r)
        self.preemptions = Gauge("sgrun_preemptions_total", "Running requests preempted for KV pages (engine count)",
                                 registry=r)
        self.running = Gauge("sgrun_requests_running", "Requests in the running batch", registry=r)
        self.waiting = Gauge("sgrun_requests_waiting", "Requests waiting to be scheduled", registry=r)
        self.pages = Gauge("sgrun_kv_pages", "KV pool pages by state", ["state"], registry=r)
        self.kv_usage = Gauge("sgrun_kv_pool_usage_ratio", "Fraction of KV pages in use by running requests", registry=r)
        self.cache_hit_rate = Gauge("sgrun_radix_cache_hit_rate", "Prompt tokens served from the radix cache / prompt tokens",
                                    registry=r)
        self.cached_tokens = Gauge("sgrun_cached_prompt_tokens_total", "Prompt tokens served from the radix cache",
                                   registry=r)
        self.engine_prompt_tokens = Gauge("sgrun_engine_prompt_tokens_total", "Prompt tokens the engine has admitted",
                                          registry=r)
        self.spec_tokens = Gauge("sgrun_spec_tokens_total", "N-gram speculative decoding: draft tokens proposed "
                                 "(kind=drafted) and accepted by the target model (kind=accepted)", ["kind"],
                                 registry=r)
        self.spec_steps = Gauge("sgrun_spec_verify_steps_total", "Sequence-steps that verified a speculative draft",
                                registry=r)
        self.spec_rate = Gauge("sgrun_spec_acceptance_rate", "Accepted / drafted speculative tokens (0 before any)",
                               registry=r)
        self.constraint_cache_hits = Gauge("sgrun_constraint_cache_hits_total", "Compiled-constraint cache hits",
                                           registry=r)
        self.constraint_cache_misses = Gauge("sgrun_constraint_cache_misses_total", "Compiled-constraint cache misses",
                                             registry=r)

    # --- recorded by handlers ------------------------------------------------------------
    def observe_request(self, kind: str, prompt_tokens: int, completion_tokens: int,
                        ttft: float | None, tpot: float | None, status: str, e2e: float | None = None) -> None:
        self.requests.labels(kind, status).inc()
        self._recent.append((ttft, tpot))
        self.prompt_tokens.inc(prompt_tokens)
        self.completion_tokens.inc(completion_tokens)
        self.completion_tokens_total += completion_tokens
        if ttft is not None:
            self.ttft.observe(ttft)
        if tpot is not None:
            self.tpot.observe(tpot)
        if e2e is not None:
            self.e2e.observe(e2e)

    def recent_latencies(self) -> list[tuple[float | None, float | None]]:
        """(TTFT, TPOT) of the last finished requests, oldest first (the web page's engine view)."""
        return list(self._recent)

    def observe_error(self, err: Any) -> None:
        self.errors.labels(getattr(err, "type", "internal_error"), str(getattr(err, "status", 500))).inc()

    def observe_constraint_compile(self, seconds: float) -> None:
        self.constraint_compile.observe(seconds)

    def observe_constraint_refusal(self, kind: str) -> None:
        self.constraint_refusals.labels(kind).inc()

    # --- scrape ---------------------------------------------------------------------------
    def render(self) -> bytes:
        self._refresh_engine_gauges()
        return generate_latest(self.registry)

    def _refresh_engine_gauges(self) -> None:
        if self.engine is None:
            return
        try:
            s: dict[str, Any] = self.engine.stats()
        except Exception:  # a scrape must never fail because the engine is busy or closing
            return
        self.running.set(s.get("running", 0))
        self.preemptions.set(s.get("preemptions", 0))
        for cause in ("client_disconnect", "error", "engine"):
            self.aborts.labels(cause).set(s.get(f"aborted_{cause}", 0))
        self.waiting.set(s.get("waiting", 0))
        for state in ("total", "free", "in_use", "cached", "evictable"):
            if f"pages_{state}" in s:
                self.pages.labels(state).set(s[f"pages_{state}"])
        total = s.get("pages_total") or 0
        if total:
            self.kv_usage.set(s.get("pages_in_use", 0) / total)
        self.cache_hit_rate.set(s.get("cache_hit_rate", 0.0) or 0.0)
        self.cached_tokens.set(s.get("cached_tokens_total", 0))
        self.engine_prompt_tokens.set(s.get("prompt_tokens_total", 0))
        self.spec_tokens.labels("drafted").set(s.get("spec_draft_tokens", 0))
        self.spec_tokens.labels("accepted").set(s.get("spec_accepted_tokens", 0))
        self.spec_steps.set(s.get("spec_verify_steps", 0))
        self.spec_rate.set(s.get("spec_acceptance_rate", 0.0))
        # The compiled-constraint cache is process-wide, owned by the constraint compiler.
        self.constraint_cache_hits.set(GLOBAL_CACHE.hits)
        self.constraint_cache_misses.set(GLOBAL_CACHE.misses)
