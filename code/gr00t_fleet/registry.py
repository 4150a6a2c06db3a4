# SPDX-License-Identifier: Apache-2.0
"""What the fleet's router and its ingress share in one process: the routers alive here (the ingress reads the live
replica ids from them) and the replicas set aside. Ray pickles a custom router's own module by value (a private
copy per deployment), so this state lives in a module of its own, which every copy imports by reference."""

import time
import weakref

ROUTERS: weakref.WeakSet = weakref.WeakSet()
SET_ASIDE: dict[str, float] = {}  # replica unique id -> monotonic time until which no request goes to it


def set_aside(replica: str, seconds: float) -> None:
    """Route nothing to ``replica`` for ``seconds`` (it answered that it cannot serve)."""
    SET_ASIDE[replica] = time.monotonic() + seconds


def live_replicas() -> list[str]:
    """The replica ids this process's routers route to now (sorted; empty before a router's first update)."""
    ids: set[str] = set()
    for router in list(ROUTERS):
        ids.update(r.replica_id.unique_id for r in router.replicas())
    return sorted(ids)


def no_replica_live() -> bool:
    """A router exists here and routes to no replica now (all dead or booting): a request would wait for one."""
    return bool(ROUTERS) and not live_replicas()
