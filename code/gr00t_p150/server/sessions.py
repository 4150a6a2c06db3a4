# SPDX-License-Identifier: Apache-2.0
"""Robot sessions: what the server keeps between one robot's requests (SERVING.md §12).

A request may carry ``session_id`` (a token of at most 128 characters) and ``seq``, a number that must grow from
one request of the session to the next: an observation older than the last one the session sent (``seq`` not
above it) is refused before any work (409 over HTTP) and never computed. The server keeps, per session, the last
chunk in model space and in physical units, when it was answered, the robot's control rate if the request gave
one, and the server-side latency of its recent requests (the median and p90 of the last ``LATENCY_WINDOW``).
Sessions are bounded in count (least recently used first out) and in idle time (``ttl_s``); ``reset`` forgets
one. Requests without ``session_id`` are served exactly as before and touch nothing here.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from .exceptions import RequestRefused, SessionConflict

LATENCY_WINDOW = 32
SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


@dataclass
class Session:
    id: str
    created_at: float
    touched: float
    last_seq: int | None = None
    requests: int = 0
    control_hz: float | None = None
    answered_at: float | None = None  # wall clock (time.time()) of the last answer
    observed_at: float | None = None  # time.perf_counter() at which the last answered request arrived
    last_chunk_normalized: np.ndarray | None = None  # float32 [horizon, action_dim]
    last_actions: dict[str, np.ndarray] | None = None  # physical units
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))

    def describe(self) -> dict:
        lat = sorted(self.latencies_ms)
        return {"id": self.id, "seq": self.last_seq, "requests": self.requests, "control_hz": self.control_hz,
                "latency_ms_p50": round(float(np.percentile(lat, 50)), 3) if lat else None,
                "latency_ms_p90": round(float(np.percentile(lat, 90)), 3) if lat else None}


class SessionStore:
    def __init__(self, max_sessions: int = 64, ttl_s: float = 300.0, clock=time.monotonic):
        self.max_sessions, self.ttl_s, self._clock = max_sessions, ttl_s, clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()
        self.evicted = self.expired = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def _expire(self, now: float) -> None:
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if now - oldest.touched <= self.ttl_s:
                break
            del self._sessions[oldest.id]
            self.expired += 1

    def claim(self, session_id: str, seq: int | None, control_hz: float | None = None) -> Session:
        """The session of a new request, its ``seq`` taken (so a second request with the same ``seq`` conflicts
        even while the first is still running); raises ``SessionConflict`` for an old ``seq``."""
        now = self._clock()
        with self._lock:
            self._expire(now)
            session = self._sessions.get(session_id)
            if session is None:
                if len(self._sessions) >= self.max_sessions:
                    self._sessions.popitem(last=False)
                    self.evicted += 1
                session = self._sessions[session_id] = Session(session_id, created_at=now, touched=now)
            if seq is not None and session.last_seq is not None and seq <= session.last_seq:
                raise SessionConflict(session_id, seq, session.last_seq)
            if seq is not None:
                session.last_seq = seq
            if control_hz is not None:
                session.control_hz = control_hz
            session.touched = now
            self._sessions.move_to_end(session_id)
            return session

    def record(self, session: Session, result, latency_ms: float, observed_at: float | None = None) -> None:
        with self._lock:
            session.requests += 1
            session.observed_at = observed_at
            session.answered_at = time.time()
            session.last_chunk_normalized = np.asarray(result.action_pred, dtype=np.float32)
            session.last_actions = {k: np.asarray(v, dtype=np.float32) for k, v in result.actions.items()}
            session.latencies_ms.append(latency_ms)

    def reset(self, session_id: str) -> bool:
        with self._lock:
            return self._sessions.pop(session_id, None) is not None

    def describe(self) -> dict:
        return {"sessions": len(self._sessions), "max_sessions": self.max_sessions, "ttl_s": self.ttl_s,
                "evicted": self.evicted, "expired": self.expired}


def check_session_fields(session_id, seq, control_hz) -> None:
    """The rules every protocol applies to the session fields; raises ``RequestRefused``."""
    if session_id is None:
        if seq is not None or control_hz is not None:
            raise RequestRefused("seq" if seq is not None else "control_hz", "needs session_id")
        return
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        raise RequestRefused("session_id", "must be 1-128 characters of A-Z a-z 0-9 . _ : -")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63):
        raise RequestRefused("seq", "must be an integer in [0, 2^63)")
    if control_hz is not None and (isinstance(control_hz, bool) or not isinstance(control_hz, (int, float))
                                   or not 0 < control_hz <= 1000):
        raise RequestRefused("control_hz", "must be a number in (0, 1000]")
