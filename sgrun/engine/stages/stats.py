"""What Engine.stats() reports (the keys are listed in docs/interfaces.md), and the count of
pages held by requests that tests and the reliability suite check is zero when idle."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

from sgrun.engine.state.page_pool import PagePool
from sgrun.engine.state.radix_cache import RadixCache


class SchedulerCounts(Protocol):
    """What the stats read off the scheduler (scheduler.Scheduler is one)."""
    running: list
    waiting: Any
    prompt_tokens_total: int
    cached_tokens_total: int
    num_preemptions: int


class RunnerCounts(Protocol):
    """What the stats read off the model runner (model_runner.ModelRunner is one)."""
    forward_calls: int
    tokens_computed: int

# Why a request was aborted (the keys of the aborted_* counters).
ABORT_CAUSES = ("client_disconnect", "error", "engine")


@dataclass
class SpeculationCounters:
    """N-gram speculation's acceptance (ngram_draft.py, speculative.py): per verify step, the
    draft tokens proposed and how many of them the target model accepted."""
    enabled: bool = True          # False under overlap scheduling (step.py: what overlap excludes)
    steps: int = 0                # sequence-steps that verified a draft
    drafted: int = 0
    accepted: int = 0

    def record(self, drafted: int, accepted: int) -> None:
        self.steps += 1
        self.drafted += drafted
        self.accepted += accepted

    def stats(self) -> dict[str, int | float]:
        return {"spec_enabled": int(self.enabled), "spec_verify_steps": self.steps,
                "spec_draft_tokens": self.drafted, "spec_accepted_tokens": self.accepted,
                "spec_acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0}


def engine_stats(scheduler: SchedulerCounts, pool: PagePool, cache: RadixCache | None, runner: RunnerCounts,
                 num_steps: int, tp: int, model: Any, aborted: Counter[str],
                 speculation: SpeculationCounters) -> dict[str, Any]:
    """`model`: its `comm_stats()` are reported with tp > 1 (tp_group.TensorParallelModel)."""
    cached = cache.num_pages if cache else 0
    evictable = cache.num_evictable_pages if cache else 0
    prompt_total = scheduler.prompt_tokens_total
    waiting = tuple(scheduler.waiting)    # one C-level copy: the engine thread may be appending
    return {
        "running": len(scheduler.running), "waiting": len(waiting),
        "waiting_tokens": sum(len(seq.tokens) - seq.num_computed for seq in waiting),
        "pages_total": pool.num_pages, "pages_free": pool.num_free,
        "pages_in_use": pool.num_pages - pool.num_free - evictable,
        "pages_cached": cached, "pages_evictable": evictable,
        "page_size": pool.page_size,
        "prompt_tokens_total": prompt_total, "cached_tokens_total": scheduler.cached_tokens_total,
        "cache_hit_rate": scheduler.cached_tokens_total / prompt_total if prompt_total else 0.0,
        "forward_calls": runner.forward_calls,
        "tokens_computed": runner.tokens_computed, "preemptions": scheduler.num_preemptions,
        "steps": num_steps, "tp": tp,
        **(model.comm_stats() if tp > 1 else {}),
        **{f"aborted_{cause}": aborted[cause] for cause in ABORT_CAUSES},
        **speculation.stats(),
    }


def request_pages(pool: PagePool, cache: RadixCache | None) -> int:
    """Pages held by requests (not only by the cache). Zero when nothing is running."""
    tree_pages: set[int] = set()
    if cache is not None:
        for node in cache.nodes():
            tree_pages.update(node.pages)
    return sum(1 for p, r in enumerate(pool.ref) if r > (1 if p in tree_pages else 0))
