# SPDX-License-Identifier: Apache-2.0
"""Admission control in front of the device owner: at most ``GR00T_MAX_QUEUE`` requests in the server at
once (reading, decoding, waiting or on the device), so memory held by decoded frames is bounded and a
client is told at once to come back (429 + Retry-After) instead of waiting behind everybody.

Every method runs on the event loop's thread, so the counter needs no lock.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque

from .exceptions import Draining, QueueFull


class Admission:
    def __init__(self, limit: int):
        self.limit = limit
        self.depth = 0
        self.draining = False
        self._drain_from = float("inf")
        self.admitted = 0
        self.refused = 0
        self._service_s: deque[float] = deque(maxlen=64)  # recent time in the server of admitted requests

    def enter(self, arrived_at: float) -> float:
        """Admit one request whose head arrived at ``arrived_at`` (``time.perf_counter()``) or raise; returns
        the admission time."""
        if arrived_at >= self._drain_from:
            raise Draining("the server is shutting down")
        if self.depth >= self.limit:
            self.refused += 1
            raise QueueFull(self.depth, self.retry_after_s())
        self.depth += 1
        self.admitted += 1
        return time.perf_counter()

    def drain(self) -> None:
        """Refuse requests that arrive from now on (503); those in flight are still admitted and answered."""
        self.draining = True
        self._drain_from = time.perf_counter()

    def leave(self, admitted_at: float) -> None:
        self.depth -= 1
        self._service_s.append(time.perf_counter() - admitted_at)

    def retry_after_s(self) -> int:
        """Whole seconds until a place is likely free: the median recent service time times the queue
        ahead, over the one device thread; at least 1 (HTTP's Retry-After counts whole seconds)."""
        typical = statistics.median(self._service_s) if self._service_s else 1.0
        return max(1, math.ceil(typical * self.depth))
