# SPDX-License-Identifier: Apache-2.0
"""The single server's ASGI app driven in-process: its lifespan (boot: weights, warm-up, fidelity gate; and
shutdown: drain, ``backend.close()``) and one HTTP exchange at a time as plain values. A fleet replica is exactly
the single server's app behind this, so every guard, refusal and response body is the single server's own."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass
class Exchange:
    """One HTTP request as the ingress forwards it, and the single server's answer."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


class Lifespan:
    """ASGI lifespan protocol: ``startup()`` returns once the app said startup complete (raises with the app's
    message when it failed), ``shutdown()`` once it said shutdown complete."""

    def __init__(self, app):
        self.app = app
        self._to_app: asyncio.Queue = asyncio.Queue()
        self._from_app: asyncio.Queue = asyncio.Queue()
        self._task: asyncio.Task | None = None

    async def _receive(self):
        return await self._to_app.get()

    async def _send(self, message):
        await self._from_app.put(message)

    async def _expect(self, wanted: str) -> None:
        message = await self._from_app.get()
        if message["type"] == f"lifespan.{wanted}.failed":
            raise RuntimeError(message.get("message") or f"lifespan {wanted} failed")
        if message["type"] != f"lifespan.{wanted}.complete":
            raise RuntimeError(f"unexpected ASGI lifespan message {message['type']!r}")

    async def startup(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        self._task = asyncio.get_running_loop().create_task(self.app(scope, self._receive, self._send))
        await self._to_app.put({"type": "lifespan.startup"})
        waiting = asyncio.get_running_loop().create_task(self._expect("startup"))
        done, _ = await asyncio.wait({waiting, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if waiting not in done:  # the app returned (raised) without answering: its exception is the reason
            waiting.cancel()
            self._task.result()
            raise RuntimeError("the app ended its lifespan during startup")
        waiting.result()

    async def shutdown(self) -> None:
        if self._task is None or self._task.done():
            return
        await self._to_app.put({"type": "lifespan.shutdown"})
        await self._expect("shutdown")
        await self._task


async def call(app, method: str, path: str, headers: list[tuple[str, str]], body: bytes,
               client: tuple[str, int] = ("127.0.0.1", 0)) -> Exchange:
    """One HTTP exchange with ``app``: the request whole, the response collected (the single server answers
    every route with one body, never a stream)."""
    raw_path, _, query = path.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": raw_path, "raw_path": raw_path.encode(),
             "query_string": query.encode(), "root_path": "", "client": client, "server": ("127.0.0.1", 0),
             "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]}
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # nobody disconnects in-process: wait until cancelled

    status, out_headers, chunks = 500, [], []

    async def send(message):
        nonlocal status, out_headers
        if message["type"] == "http.response.start":
            status = message["status"]
            out_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return Exchange(status, out_headers, b"".join(chunks))
