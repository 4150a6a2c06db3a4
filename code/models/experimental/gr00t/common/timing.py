# SPDX-License-Identifier: Apache-2.0
"""Named laps in milliseconds, shared by every policy (CUDA kernels are synchronised before a lap)."""

from __future__ import annotations

import time

import torch


class Stopwatch:
    """Accumulates named laps in milliseconds."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str, device: torch.device | None = None) -> None:
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize(device)  # kernels are asynchronous: time them, not their launch
        now = time.perf_counter()
        self.ms[name] = self.ms.get(name, 0.0) + (now - self._t) * 1e3
        self._t = now

    def add(self, name: str, ms: float) -> None:
        """Record a lap measured elsewhere (CUDA events around a graph replay) and restart the clock."""
        self.ms[name] = self.ms.get(name, 0.0) + ms
        self._t = time.perf_counter()
