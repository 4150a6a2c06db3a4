# SPDX-License-Identifier: Apache-2.0
"""Which replica serves a request: Ray Serve's request-router API (``ray.serve.request_router``), configured on
the policy deployment with ``RequestRouterConfig(request_router_class=...)``.

- A request with a robot session goes to the replica that served the session last (``prefer``: the ingress
  remembers it) while that replica is live, so a session never moves while its replica is healthy, not even when
  replicas join. A session new to the ingress, or whose replica left, goes to its rendezvous owner: of the live
  replicas, the one with the highest score ``blake2b(session, replica id)``. Every router computes the same owner
  from the same replica set without talking to the others (several ingress replicas agree), and when a replica
  leaves only the sessions it held move, spread over the others by their next-highest scores. A ring of virtual
  nodes would do the same with more state.
- A request without a session goes to the replica with the fewest requests in flight: the whole live set is one
  rank, and Ray's router probes queue lengths and takes the lowest (``_select_from_candidate_replicas``).
- ``replica=<id>`` pins a request to one replica (/info and /metrics ask each replica); ``avoid=[ids]`` leaves out
  replicas a request must not go back to (a retry after a replica answered 503).

Replicas the ingress saw answer 503 (backend lost, draining) are set aside for a while (``registry.set_aside``)
until Ray's health check replaces them, so that no session is routed to a replica that will only answer 503. The
router keeps no session table: ownership is a pure function of the live replica set.

Ray pickles a custom router's module by value (each process gets a private copy of its globals), so what the
router shares with the ingress in the same process lives in ``registry.py``. This router matches each routed
replica to its own request (Ray's default, no ``FIFOMixin``): a FIFO router may hand a replica chosen for one
request to an older one, which would break stickiness.
"""

from __future__ import annotations

import hashlib
import logging
import time

from gr00t_fleet import registry
from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

log = logging.getLogger("ray.serve")


def score(session: str, replica: str) -> int:
    """The rendezvous weight of ``replica`` for ``session``: stable across processes and machines."""
    return int.from_bytes(hashlib.blake2b(f"{session}\x00{replica}".encode(), digest_size=8).digest(), "big")


def owner(session: str, replicas: list[str]) -> str | None:
    """The replica (unique id) that owns ``session`` among ``replicas``."""
    return max(replicas, key=lambda r: score(session, r), default=None)


class SessionAffinityRouter(RequestRouter):
    def initialize_state(self, **kwargs):
        registry.ROUTERS.add(self)

    def replicas(self) -> list[RunningReplica]:
        return list(self._replicas_list)

    def on_replica_actor_died(self, replica_id: ReplicaID):
        log.warning("gr00t fleet: replica %s died; its sessions move to the next-highest scoring replica",
                    replica_id.unique_id)
        super().on_replica_actor_died(replica_id)

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        kwargs = pending_request.kwargs if pending_request is not None else {}
        pinned = kwargs.get("replica")
        if pinned is not None:
            return [[r for r in candidate_replicas if r.replica_id.unique_id == pinned]]
        now, avoid = time.monotonic(), set(kwargs.get("avoid") or ())
        usable = [r for r in candidate_replicas
                  if r.replica_id.unique_id not in avoid and registry.SET_ASIDE.get(r.replica_id.unique_id, 0) <= now]
        if not usable:  # everything set aside: try them all rather than hold the request
            usable = [r for r in candidate_replicas if r.replica_id.unique_id not in avoid] or candidate_replicas
        session = kwargs.get("session")
        if session is None:
            return [usable]
        ids = [r.replica_id.unique_id for r in usable]
        best = kwargs.get("prefer") if kwargs.get("prefer") in ids else owner(session, ids)
        return [[r for r in usable if r.replica_id.unique_id == best]]
