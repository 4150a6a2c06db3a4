# SPDX-License-Identifier: Apache-2.0
"""The fleet's ``/metrics``: every replica's own exposition, **per replica** (each sample gains a ``replica`` label,
so nothing is summed that should not be: a histogram's buckets stay per replica, and PromQL's ``sum without
(replica)`` gives the fleet), merged family by family with the ingress's own ``gr00t_fleet_*`` counters.
Parsed with ``prometheus_client``'s parser; written in the text format 0.0.4."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class FleetMetrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.requests = Counter("gr00t_fleet_requests", "Requests through the ingress by route and status",
                                ("route", "status"), registry=r)
        self.retries = Counter("gr00t_fleet_retries", "Requests the ingress sent to a second replica, by reason "
                               "(replica_died: the replica died under it; replica_lost: it answered backend lost)",
                               ("reason",), registry=r)
        for reason in ("replica_died", "replica_unavailable"):  # exported at 0 from the start
            self.retries.labels(reason)
        self.failover_errors = Counter("gr00t_fleet_failover_errors", "Requests answered 503 + Retry-After because "
                                       "their replica died and a retry was not safe", registry=r)
        self.moves = Counter("gr00t_fleet_session_moves", "Session requests answered by another replica than the "
                             "session's previous one", registry=r)
        self.forward_seconds = Histogram("gr00t_fleet_forward_seconds", "Ingress time of a forwarded request, replica "
                                         "included", ("route",), buckets=BUCKETS_S, registry=r)


class _Replicas:
    """A collector of the replicas' parsed families, each sample labelled with its replica."""

    def __init__(self, replicas: dict[str, str]):
        self.replicas = replicas

    def collect(self):
        families: dict[str, Metric] = {}
        for replica, text in sorted(self.replicas.items()):
            for family in text_string_to_metric_families(text):
                merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                merged.samples.extend(s._replace(labels={**s.labels, "replica": replica}) for s in family.samples)
        yield from families.values()


def merge(own: FleetMetrics, replicas: dict[str, str]) -> str:
    """The ingress's metrics and each replica's (text exposition by replica id), family by family."""
    registry = CollectorRegistry()
    registry.register(_Replicas(replicas))
    return generate_latest(own.registry).decode() + generate_latest(registry).decode()
