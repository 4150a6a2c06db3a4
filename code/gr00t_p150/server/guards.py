# SPDX-License-Identifier: Apache-2.0
"""The ASGI layer in front of every route: request counting, bearer auth, the body's size and read-time
bounds, and admission to ``/predict``. All of it runs before a byte of the body is parsed, so a refused
request costs almost nothing.

Order: count (always, whatever the outcome) → auth (401) → admission (429 / 503) → body limits (413 / 408).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from dataclasses import dataclass, field

from starlette.exceptions import HTTPException

from .admission import Admission, Draining, QueueFull
from .errors import error_body
from .metrics import Metrics


@dataclass
class Runtime:
    """What the guards need, shared with the lifespan (``config`` is set once it has been read)."""

    config: object | None = None
    admission: Admission = field(default_factory=lambda: Admission(8))
    metrics: Metrics = field(default_factory=Metrics)
    max_body_bytes: int = 64 * 2**20
    body_timeout_s: float = 30.0

    def configure(self, config) -> None:
        self.config = config
        self.admission = Admission(config.max_queue)
        self.metrics.queue_limit.set(config.max_queue)
        self.max_body_bytes = config.max_body_bytes
        self.body_timeout_s = config.body_timeout_s


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"request body exceeds GR00T_MAX_BODY_BYTES ({limit} bytes)")


class BodyTooSlow(HTTPException):
    def __init__(self, limit_s: float):
        super().__init__(408, f"the request body did not arrive within GR00T_BODY_TIMEOUT_S ({limit_s:g} s)",
                         headers={"Connection": "close"})


def authorized(scope, key: str) -> bool:
    """``Authorization: Bearer <key>``, compared in constant time."""
    sent = dict(scope.get("headers", [])).get(b"authorization", b"")
    return hmac.compare_digest(sent, b"Bearer " + key.encode())


class Guards:
    def __init__(self, app, runtime: Runtime):
        self.app, self.runtime = app, runtime

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        metrics, status = self.runtime.metrics, [500]

        async def counted_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self._guarded(scope, receive, counted_send)
        finally:
            metrics.requests.labels(metrics.route(scope["path"]), str(status[0])).inc()

    async def _guarded(self, scope, receive, send):
        rt = self.runtime
        path = scope["path"].rstrip("/") or "/"
        config = rt.config
        if config is not None and config.api_key and path in config.auth_routes and not authorized(scope,
                                                                                                  config.api_key):
            refusal = error_body(401, "Authorization", "this server needs 'Authorization: Bearer <GR00T_API_KEY>'")
            refusal.headers["WWW-Authenticate"] = "Bearer"
            return await refusal(scope, receive, send)
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > rt.max_body_bytes:
            return await error_body(413, None, BodyTooLarge(rt.max_body_bytes).detail)(scope, receive, send)
        if path != "/predict" or scope["method"] != "POST":
            return await self.app(scope, self._bounded(receive), send)
        admission = rt.admission
        try:
            admitted_at = admission.enter()
        except QueueFull as exc:
            rt.metrics.refused.labels("queue_full").inc()
            refusal = error_body(429, None, str(exc), retry_after_s=exc.retry_after_s)
            refusal.headers.update({"Retry-After": str(exc.retry_after_s), "Connection": "close"})
            return await refusal(scope, receive, send)
        except Draining as exc:
            rt.metrics.refused.labels("draining").inc()
            refusal = error_body(503, None, str(exc))
            refusal.headers["Connection"] = "close"
            return await refusal(scope, receive, send)
        rt.metrics.queue_depth.set(admission.depth)
        scope["gr00t.admitted_at"] = admitted_at
        try:
            await self.app(scope, self._bounded(receive), send)
        finally:
            admission.leave(admitted_at)
            rt.metrics.queue_depth.set(admission.depth)

    def _bounded(self, receive):
        """``receive`` that refuses a body over the size limit (413) or slower than the time limit (408).

        Both are HTTPExceptions, which FastAPI passes through its body parsing."""
        limit, limit_s = self.runtime.max_body_bytes, self.runtime.body_timeout_s
        seen, deadline, done = 0, time.monotonic() + limit_s, False

        async def bounded():
            nonlocal seen, done
            if done:  # the body is complete: what follows is a disconnect, waited for without a limit
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise BodyTooSlow(limit_s) from None
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit)
            done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        return bounded
