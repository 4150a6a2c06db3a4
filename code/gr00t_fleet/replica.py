# SPDX-License-Identifier: Apache-2.0
"""One fleet replica: the single server, unchanged, in a Ray Serve replica that owns one accelerator.

The replica builds the single server's app (``gr00t_p150.server.web.factory.create_app``) and runs its lifespan in
``__init__``: configuration from the ``GR00T_*`` environment, weights, warm-up, fidelity gate, micro-batching. Ray
counts the replica as running only when ``__init__`` returns, so a replica takes requests only once it would have
printed "Application startup complete" as a single server. Requests reach it as whole HTTP exchanges
(``forward``) and go through the app's own guards and routes: auth, body limits, admission (429 + Retry-After),
validation and every response body are the single server's.

``check_health`` is Ray's health check: a replica whose backend is lost (``/health`` 503: the device failing every
request, or closed) fails it, and Ray takes it out of rotation and starts a new one. On scale-down or
``serve shutdown`` Ray stops routing to the replica, waits for its requests in flight (the deployment's
``graceful_shutdown_timeout_s``), then calls ``__del__``: the single server's shutdown, which closes the backend
(device, traces) after the requests already queued.

Accelerators: a GPU replica asks Ray for ``num_gpus=1`` and Ray sets ``CUDA_VISIBLE_DEVICES``; a Tenstorrent
replica asks for one ``TTNPU`` (Ray's Tenstorrent accelerator, counted from ``/dev/tenstorrent/*`` on each node)
and Ray sets ``TT_VISIBLE_DEVICES``, which the replica hands to tt-metal as ``TT_METAL_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

from .asgi import Exchange, Lifespan, call

log = logging.getLogger("ray.serve")
DRILLS = ("device_lost", "hold")


def accelerator_env(environ=os.environ) -> dict[str, str]:
    """The device variables this replica's process was given by Ray, as the backends read them."""
    out = {}
    tt = environ.get("TT_VISIBLE_DEVICES")
    if tt is not None and "TT_METAL_VISIBLE_DEVICES" not in environ:
        out["TT_METAL_VISIBLE_DEVICES"] = tt
    return out


class PolicyReplica:
    async def __init__(self, drills: bool = False):
        from ray import serve

        os.environ.update(accelerator_env())
        from gr00t_p150.server.web.factory import create_app

        self.id = serve.get_replica_context().replica_id.unique_id
        self.pid, self.host, self.drills = os.getpid(), socket.gethostname(), drills
        self.started_at, self.hold_s = time.time(), 0.0
        self.app = create_app()
        self.lifespan = Lifespan(self.app)
        await self.lifespan.startup()  # raises (and Ray retries the replica) when boot fails
        log.info("gr00t fleet: replica %s (pid %d) ready", self.id, self.pid)

    @property
    def engine(self):
        return self.app.state.engine

    async def forward(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes,
                      **_routing) -> tuple[str, Exchange]:
        """One HTTP exchange through the single server's app. ``_routing`` (session, replica, avoid, prefer) was read
        by the router (``router.py``) to choose this replica."""
        if self.hold_s and path.startswith(("/predict", "/reset")):  # the "hold" drill: a request kept in flight
            await asyncio.sleep(self.hold_s)
        return self.id, await call(self.app, method, path, headers, body)

    async def check_health(self) -> None:
        engine = self.engine
        if engine.lost:
            raise RuntimeError(f"the backend is lost: {engine.last_device_error}")
        if not engine.ready:
            raise RuntimeError("the model is not ready")

    async def describe(self, **_routing) -> dict:
        """What /info says about this replica (``_routing``: the router's fields)."""
        engine, runtime = self.engine, self.app.state.runtime
        return {"id": self.id, "pid": self.pid, "host": self.host, "started_at": self.started_at,
                "state": "lost" if engine.lost else "ready" if engine.ready else "booting",
                "device": {k: v for k, v in engine.describe_backend().items() if k in ("name", "device", "dtype")},
                "accelerator_env": {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "TT_VISIBLE_DEVICES",
                                                               "TT_METAL_VISIBLE_DEVICES") if k in os.environ},
                "sessions": len(runtime.sessions), "queue_depth": runtime.admission.depth,
                "device_errors": engine.device_errors, "hold_s": self.hold_s}

    async def drill(self, kind: str, seconds: float = 0.0, **_routing) -> dict:
        """A failover drill (deployment option ``drills``, off by default):

        - ``device_lost`` leaves the engine as a lost device does (``LOST_AFTER`` consecutive device errors, every
          later model call failing), so that /health answers 503, requests 503, and Ray's health check replaces
          the replica;
        - ``hold`` keeps every later /predict and /reset ``seconds`` in flight before it runs (0 ends it), so that a
          test or demo can kill the replica, or scale it down, with requests in flight."""
        if not self.drills:
            raise PermissionError("drills are off for this deployment (build the fleet with drills=true)")
        if kind not in DRILLS:
            raise ValueError(f"unknown drill {kind!r}; one of {DRILLS}")
        if kind == "hold":
            self.hold_s = max(0.0, float(seconds))
            return await self.describe()
        from gr00t_p150.server.engine import LOST_AFTER

        engine = self.engine

        def lost(*_args, **_kwargs):
            raise RuntimeError("drill: the device stopped answering")

        engine.backend.run = engine.backend.run_batch = lost
        for _ in range(LOST_AFTER):
            engine._device_failed(RuntimeError("drill: the device stopped answering"))
        log.warning("gr00t fleet: drill %s on replica %s", kind, self.id)
        return await self.describe()

    async def __del__(self):
        """Ray stopped routing here and its requests in flight are answered: the single server's drain, then its
        shutdown (``backend.close()``: device and traces released)."""
        lifespan = getattr(self, "lifespan", None)
        if lifespan is None:
            return
        self.app.state.runtime.admission.drain()
        await lifespan.shutdown()
        log.info("gr00t fleet: replica %s closed its backend", self.id)
