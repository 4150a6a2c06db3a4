# SPDX-License-Identifier: Apache-2.0
"""The state every door of the server shares, made before the model boots: the configuration once read, the
one admission queue, the robot sessions and the metrics. The HTTP guards, the service and the wire endpoints
all hold the same ``Runtime``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .admission import Admission
from .exceptions import Draining, QueueFull
from .metrics import Metrics
from .sessions import SessionStore


@dataclass
class Runtime:
    config: object | None = None  # the ServerConfig, once the lifespan has read it
    admission: Admission = field(default_factory=lambda: Admission(8))
    metrics: Metrics = field(default_factory=Metrics)
    max_body_bytes: int = 64 * 2**20
    body_timeout_s: float = 30.0
    sessions: SessionStore = field(default_factory=SessionStore)

    def configure(self, config) -> None:
        self.config = config
        self.admission = Admission(config.max_queue)
        self.sessions = SessionStore(config.max_sessions, config.session_ttl_s)
        self.metrics.queue_limit.set(config.max_queue)
        self.max_body_bytes = config.max_body_bytes
        self.body_timeout_s = config.body_timeout_s

    def admit(self, arrived_at: float | None = None) -> float:
        """A place in the admission queue for a request that arrived at ``arrived_at`` (``perf_counter``; now
        when None), on the event loop's thread; raises ``QueueFull`` or ``Draining`` (counted by reason)."""
        try:
            at = self.admission.enter(time.perf_counter() if arrived_at is None else arrived_at)
        except QueueFull:
            self.metrics.refused.labels("queue_full").inc()
            raise
        except Draining:
            self.metrics.refused.labels("draining").inc()
            raise
        self.metrics.queue_depth.set(self.admission.depth)
        return at

    def release(self, admitted_at: float) -> None:
        self.admission.leave(admitted_at)
        self.metrics.queue_depth.set(self.admission.depth)
