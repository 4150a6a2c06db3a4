# SPDX-License-Identifier: Apache-2.0
"""The HTTP side: one keep-alive connection per worker (``Client``) that sends a ``Spec`` exactly as built
(headers, a lying Content-Length) and reports an ``Outcome``; ``get_json`` for /demo, /info and /health."""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, field

from .hostile import Spec


@dataclass
class Outcome:
    status: int | None = None
    headers: dict = field(default_factory=dict)
    body: bytes = b""
    seconds: float = 0.0
    error: str | None = None  # "HANG" or "conn_error: <type>"


class Client:
    """One keep-alive connection; reconnects when the server closed it."""

    def __init__(self, host: str, port: int, timeout: float, auth: str | None = None):
        self.host, self.port, self.timeout, self.auth = host, port, timeout, auth
        self.conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def send(self, spec: Spec) -> Outcome:
        for attempt in range(2):
            fresh = self.conn is None
            if fresh:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            t0 = time.perf_counter()
            try:
                outcome = self.exchange(spec)
            except TimeoutError:
                self.close()
                return Outcome(seconds=time.perf_counter() - t0, error="HANG")
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if not fresh and attempt == 0:
                    continue  # the server closed an idle keep-alive connection: retry once on a new one
                return Outcome(seconds=time.perf_counter() - t0, error=f"conn_error: {type(exc).__name__}")
            outcome.seconds = time.perf_counter() - t0
            if spec.close_after or outcome.headers.get("connection", "").lower() == "close":
                self.close()
            return outcome
        return Outcome(error="conn_error: retry")

    def exchange(self, spec: Spec) -> Outcome:
        conn = self.conn
        conn.putrequest(spec.method, spec.path, skip_accept_encoding=True)
        for name, value in spec.headers:
            conn.putheader(name, value)
        if self.auth:
            conn.putheader("Authorization", f"Bearer {self.auth}")
        if spec.method == "POST":
            length = spec.declared_length if spec.declared_length is not None else len(spec.body)
            conn.putheader("Content-Length", str(length))
        conn.endheaders(spec.body or None)
        resp = conn.getresponse()
        body = resp.read()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return Outcome(status=resp.status, headers=headers, body=body)


def get_json(host: str, port: int, path: str, timeout: float = 60, auth: str | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {auth}"} if auth else {}
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        try:
            return resp.status, json.loads(data)
        except ValueError:
            return resp.status, {}
    finally:
        conn.close()
