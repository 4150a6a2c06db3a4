# SPDX-License-Identifier: Apache-2.0
"""The ASGI layer in front of every route: request counting, bearer auth, the body's size and read-time
bounds, and admission to ``/predict``. All of it runs before the body is parsed, so a refused request costs
almost nothing.

Order: count (always, whatever the outcome) → auth (401) → the body, read whole within its size and time
limits (413 / 408) → admission to ``/predict`` (429 / 503) → the app, which gets the body in one message.
A request is admitted only once its body has arrived, so clients stalling in mid-upload cannot take the
places of requests that are ready (each of them is bounded by GR00T_BODY_TIMEOUT_S instead).
"""

from __future__ import annotations

import asyncio
import hmac
import time

from starlette.exceptions import HTTPException

from ..exceptions import BodyTooLarge, BodyTooSlow, Draining, QueueFull
from ..refusals import refusal
from ..runtime import Runtime
from .responses import error_body, refusal_response


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
            route = metrics.route(scope["path"])
            metrics.requests.labels(route, str(status[0])).inc()
            if route == "/predict" and scope["method"] == "POST":  # HTTP's action requests, beside the others'
                metrics.answered("http", status[0])

    async def _guarded(self, scope, receive, send):
        rt = self.runtime
        scope["gr00t.arrived_at"] = time.perf_counter()
        path = scope["path"].rstrip("/") or "/"
        config = rt.config
        if config is not None and config.api_key and path in config.auth_routes and not authorized(scope,
                                                                                                  config.api_key):
            denied = error_body(401, "Authorization", "this server needs 'Authorization: Bearer <GR00T_API_KEY>'")
            denied.headers["WWW-Authenticate"] = "Bearer"
            return await denied(scope, receive, send)
        try:
            body = await self._read_body(scope, receive)
        except HTTPException as exc:
            denied = error_body(exc.status_code, None, str(exc.detail))
            denied.headers.update({**(exc.headers or {}), "Connection": "close"})
            return await denied(scope, receive, send)
        replay = _replay(body, receive)
        if path != "/predict" or scope["method"] != "POST":
            return await self.app(scope, replay, send)
        try:
            admitted_at = rt.admit(scope["gr00t.arrived_at"])
        except (QueueFull, Draining) as exc:
            return await refusal_response(refusal(exc))(scope, receive, send)
        try:
            await self.app(scope, replay, send)
        finally:
            rt.release(admitted_at)

    async def _read_body(self, scope, receive) -> bytes:
        """The whole body, refused (413) past GR00T_MAX_BODY_BYTES by Content-Length or while it streams in,
        and (408) when it has not all arrived GR00T_BODY_TIMEOUT_S after the head."""
        limit, limit_s = self.runtime.max_body_bytes, self.runtime.body_timeout_s
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise BodyTooLarge(limit)
        chunks, seen, deadline = [], 0, time.monotonic() + limit_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise BodyTooSlow(limit_s) from None
            if message["type"] != "http.request":  # the client went away
                raise HTTPException(400, "the client disconnected before its body was complete")
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > limit:
                raise BodyTooLarge(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _replay(body: bytes, receive):
    """``receive`` for the app: the body read already, in one message, then the real channel (disconnects)."""
    sent = False

    async def replay():
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
