# SPDX-License-Identifier: Apache-2.0
"""Micro-batching: requests from different robots that reach the device within a short window run as one model
call (SERVING.md §13).

Every request is prepared on its own thread as before and then queued here, on the event loop. A collector takes
the oldest queued request as the leader of the next batch; it waits until ``max_batch`` requests of the leader's
key are queued or until ``window_ms`` has passed since the leader was queued, whichever is first, then hands the
leader and the requests of its key behind it (oldest first, at most ``max_batch``) to the device thread as one
group. Requests of another key (another prompt length or image shape) stay queued for a later group, so stacking
needs no padding. While the device runs a group, new requests gather; a leader that already waited longer than
the window goes at once, so the window only adds latency when the device is idle.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Pending:
    """A request waiting for the device: its prepared inputs, deadline and the future its caller awaits."""

    prepared: Any
    deadline: float | None
    key: Hashable
    future: asyncio.Future
    queued_at: float = field(default_factory=time.perf_counter)


class MicroBatcher:
    """``run_group(list[Pending]) -> list[result | BaseException]`` runs on ``executor`` (the device thread), one
    entry per request in order; each caller gets its own result or its own exception."""

    def __init__(self, max_batch: int, window_ms: float, key: Callable[[Any], Hashable],
                 run_group: Callable[[list[Pending]], list], executor):
        if max_batch < 2 or window_ms <= 0:
            raise ValueError("a MicroBatcher needs max_batch >= 2 and window_ms > 0 (otherwise batching is off)")
        self.max_batch, self.window_s = max_batch, window_ms / 1e3
        self._key, self._run_group, self._executor = key, run_group, executor
        self._queue: list[Pending] = []
        self._arrived = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.model_calls = self.requests = 0
        self.calls_by_size: Counter[int] = Counter()

    async def submit(self, prepared, deadline: float | None = None):
        """Queue one prepared request and wait for its own result (its exception is raised here)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._collect(), name="gr00t-micro-batcher")
        pending = Pending(prepared, deadline, self._key(prepared), asyncio.get_running_loop().create_future())
        self._queue.append(pending)
        self._arrived.set()
        return await pending.future

    def _same_key(self, key) -> list[Pending]:
        return [p for p in self._queue if p.key == key][: self.max_batch]

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._queue = [p for p in self._queue if not p.future.done()]  # callers that went away
            if not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            leader = self._queue[0]
            left = leader.queued_at + self.window_s - time.perf_counter()
            if len(self._same_key(leader.key)) < self.max_batch and left > 0:
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), left)
                except asyncio.TimeoutError:
                    pass
                continue  # look again: the group may be full now, or the window over
            group = self._same_key(leader.key)
            taken = {id(p) for p in group}
            self._queue = [p for p in self._queue if id(p) not in taken]
            try:
                outcomes = await loop.run_in_executor(self._executor, self._run_group, group)
            except BaseException as exc:  # the executor itself failed (shut down): every caller hears it
                outcomes = [exc] * len(group)
                if isinstance(exc, asyncio.CancelledError):
                    for p in group:
                        if not p.future.done():
                            p.future.cancel()
                    raise
            self.model_calls += 1
            self.requests += len(group)
            self.calls_by_size[len(group)] += 1
            for p, outcome in zip(group, outcomes):
                if p.future.done():  # the caller was cancelled (client gone): nobody to tell
                    continue
                if isinstance(outcome, BaseException):
                    p.future.set_exception(outcome)
                else:
                    p.future.set_result(outcome)

    def describe(self) -> dict:
        return {"enabled": True, "max_batch": self.max_batch, "window_ms": round(self.window_s * 1e3, 3),
                "model_calls": self.model_calls, "requests": self.requests,
                "calls_by_size": {str(k): v for k, v in sorted(self.calls_by_size.items())}}

    def close(self) -> None:
        """Stop collecting; requests still queued are cancelled (the server is shutting down)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for p in self._queue:
            if not p.future.done():
                p.future.cancel()
        self._queue.clear()
