"""The router's /metrics: every replica's series with a `replica` label added (one family each,
so Prometheus sees one series per replica), plus the router's own per-replica figures."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from sgrun.server.routing_policy import Replica


class _StaticCollector:
    def __init__(self, families: Iterable[Metric]):
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families


def merge_families(texts: Sequence[str], labels: Sequence[str]) -> list[Metric]:
    """Parse each replica's exposition text and merge same-named families, labelling every
    sample with its replica."""
    merged: dict[str, Metric] = {}
    for text, replica in zip(texts, labels):
        if not text:
            continue
        for fam in text_string_to_metric_families(text):
            out = merged.get(fam.name)
            if out is None:
                out = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            for s in fam.samples:
                out.add_sample(s.name, {**s.labels, "replica": replica}, s.value, s.timestamp, s.exemplar)
    return list(merged.values())


def router_families(replicas: Sequence[Replica]) -> list[Metric]:
    healthy = Metric("sgrun_router_replica_healthy", "1 while the replica is in rotation", "gauge")
    in_flight = Metric("sgrun_router_requests_in_flight", "Requests the router has open on the replica", "gauge")
    routed = Metric("sgrun_router_requests_routed", "Requests the router sent to the replica", "counter")
    tree = Metric("sgrun_router_prefix_tree_chars", "Characters in the router's approximate prefix tree", "gauge")
    for r in replicas:
        label = {"replica": str(r.index)}
        healthy.add_sample(healthy.name, label, 1.0 if r.healthy else 0.0)
        in_flight.add_sample(in_flight.name, label, float(r.in_flight))
        routed.add_sample(routed.name + "_total", label, float(r.routed))
        tree.add_sample(tree.name, label, float(r.tree.size))
    return [healthy, in_flight, routed, tree]


def render_merged_metrics(replicas: Sequence[Replica], texts: Sequence[str]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StaticCollector(router_families(replicas) +
                                       merge_families(texts, [str(r.index) for r in replicas])))
    return generate_latest(registry)
