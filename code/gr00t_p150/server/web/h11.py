# SPDX-License-Identifier: Apache-2.0
"""uvicorn's h11 protocol with a deadline for the request head: a connection that opens and says nothing,
or stops in the middle of its request line or headers, is closed after ``GR00T_HEADER_TIMEOUT_S``
(default 10 s). Stock uvicorn only times out idle keep-alive connections *between* requests.

Use it with ``python -m uvicorn --http gr00t_p150.server.web.h11:GuardedH11Protocol …`` (uvicorn ≥ 0.55 takes
an import string for ``--http``); the head's size is h11's limit (16 KiB by default, uvicorn's
``--h11-max-incomplete-event-size``), the body's are the app's (GR00T_MAX_BODY_BYTES, GR00T_BODY_TIMEOUT_S).
"""

from __future__ import annotations

import os

from uvicorn.protocols.http.h11_impl import H11Protocol


def header_timeout_s() -> float:
    raw = os.environ.get("GR00T_HEADER_TIMEOUT_S", "10")
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"GR00T_HEADER_TIMEOUT_S={raw!r}: expected a number of seconds") from None
    if not 0.1 <= value <= 3600:
        raise SystemExit(f"GR00T_HEADER_TIMEOUT_S={value}: expected 0.1..3600")
    return value


class GuardedH11Protocol(H11Protocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._head_timer = None
        self._head_timeout_s = header_timeout_s()

    def _awaiting_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self._head_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._awaiting_head() and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._awaiting_head():  # the head is complete: the app's own limits take over
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._awaiting_head() and not self.transport.is_closing():
            self._arm()  # the next request's head has the same deadline (keep-alive idling is shorter)

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)
