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

LATENCY_WINDOW = 32
SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class SessionConflict(Exception):
    """An observation older than the session's last one (``seq`` not increasing): 409, never computed."""

    def __init__(self, session_id: str, seq: int, last: int):
        super().__init__(f"seq {seq} is not after this session's last seq {last}: an older observation is never "
                         f"computed (send a larger seq, or reset the session)")
        self.field, self.rule = "seq", str(self)
        self.session_id, self.seq, self.last = session_id, seq, last


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


@dataclass
class RtcJob:
    """A planned RTC request: which rows of the session's previous chunk (``steps``) steer the new one, how
    (``variant``), how many of them are frozen outright, and that chunk as the plan read it."""

    variant: str
    steps: slice
    frozen: int
    beta: float | None
    last_normalized: np.ndarray
    last_actions: dict[str, np.ndarray]


def rtc_plan(session: Session, arrived_at: float, delay: int | None, horizon: int, variant: str = "inpaint",
             beta: float | None = None):
    """Real-time chunking for a request of ``session`` that arrived at ``arrived_at`` (``time.perf_counter()``):
    ``(plan, job)`` where ``plan`` is what the response reports and ``job`` an ``RtcJob``, or ``None`` (then
    ``plan["reason"]`` says why nothing is steered).

    The previous chunk answered an observation that arrived ``Δt`` earlier; at the control rate the robot has
    executed ``offset = round(Δt · control_hz)`` of its steps since, so its rows ``offset … H − 1`` are still
    ahead (the ``overlap``, ``H − offset`` rows). The delay ``d`` is the request's, or
    ``ceil(p90 of the session's recent latency · control_hz)``: the steps that will surely run from the old chunk
    while this one is computed. ``inpaint`` freezes the ``frozen = min(d, overlap)`` rows ``offset … offset + frozen``
    and uses nothing else (its overlap is ``frozen``); ``guided`` steers towards the whole overlap with weight 1 on
    the first ``frozen`` rows and decaying weights after them (``common/rtc.py``)."""
    from models.experimental.gr00t.common.rtc import DEFAULT_BETA

    plan: dict = {"variant": variant, "frozen": 0, "offset": None, "delay": delay, "overlap": 0}
    if variant == "guided":
        plan["beta"] = DEFAULT_BETA if beta is None else float(beta)
    prev, hz = session.last_chunk_normalized, session.control_hz
    if prev is None or session.observed_at is None:
        return {**plan, "reason": "no previous chunk in this session"}, None
    if hz is None:
        return {**plan, "reason": "the session has no control_hz"}, None
    offset = int(round((arrived_at - session.observed_at) * hz))
    if delay is None:
        lat = sorted(session.latencies_ms)
        delay = int(np.ceil(np.percentile(lat, 90) / 1e3 * hz)) if lat else 0
    ahead = max(0, horizon - offset)
    frozen = min(delay, ahead)
    overlap = ahead if variant == "guided" else frozen
    plan.update(offset=offset, delay=delay, frozen=frozen, overlap=overlap)
    if overlap == 0:
        return {**plan, "reason": "the previous chunk has no steps left to continue"}, None
    job = RtcJob(variant, slice(offset, offset + overlap), frozen, plan.get("beta"), session.last_chunk_normalized,
                 session.last_actions)
    return plan, job


def attach_rtc(policy, job: RtcJob, inputs) -> None:
    """Put a planned RTC job on a prepared request (``PreparedInputs``): the previous chunk's rows in this
    request's model space (``policy.frozen_prefix``: N1.7 re-expresses its absolute actions against the new
    state) as the inpainting prefix or as the guided target."""
    from models.experimental.gr00t.common.rtc import GuidedPrefix, InpaintPrefix

    rows = policy.frozen_prefix(job.last_normalized, job.last_actions, job.steps, inputs)
    horizon = int(inputs.noise.shape[1])
    if job.variant == "guided":
        inputs.guide = GuidedPrefix.build(rows, job.frozen, horizon, job.beta)
    else:
        inputs.inpaint = InpaintPrefix.build(rows, horizon)


def rtc_capabilities(backend) -> dict:
    """What /info and the wire protocols' metadata say about real-time chunking on this backend."""
    from models.experimental.gr00t.common.rtc import DEFAULT_BETA, VARIANTS

    variants = [v for v in VARIANTS if v in getattr(backend, "rtc_variants", ())]
    body = {"available": bool(variants), "variants": variants, "default_beta": DEFAULT_BETA,
            "needs": ["session_id", "control_hz"],
            "delay": "the request's rtc.delay, else ceil(p90 of the session's last "
                     f"{LATENCY_WINDOW} server latencies x control_hz)", "section": "SERVING.md §12"}
    if len(variants) < len(VARIANTS):
        missing = ", ".join(v for v in VARIANTS if v not in variants)
        body["not_here"] = f"{missing}: not on this backend ({backend_words(backend)})"
    return body


def parse_rtc(value, session_id, backend):
    """The ``rtc`` field of a request on any protocol → ``RtcRequest`` or ``None``; raises ``RequestRefused``
    when it is malformed, has no session, or the backend cannot run it."""
    from pydantic import ValidationError

    from .errors import RequestRefused
    from .schemas import RtcRequest

    if value is None:
        return None
    if not isinstance(value, RtcRequest):
        try:
            value = RtcRequest.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in ("rtc", *first["loc"]))
            raise RequestRefused(where, first["msg"]) from None
    if value.beta is not None and value.variant != "guided":
        raise RequestRefused("rtc.beta", "only the guided variant takes beta")
    if session_id is None:
        raise RequestRefused("rtc", "needs session_id (the steered steps come from the session's previous chunk)")
    variants = getattr(backend, "rtc_variants", ())
    if value.variant not in variants:
        raise RequestRefused("rtc.variant", f"{value.variant} real-time chunking does not run on this backend "
                                            f"({backend_words(backend)}); it runs: {', '.join(variants) or 'none'}")
    return value


def backend_words(backend) -> str:
    return getattr(backend, "stage", None) or type(backend).__name__


def check_session_fields(session_id, seq, control_hz) -> None:
    """The rules every protocol applies to the session fields; raises ``RequestRefused``."""
    from .errors import RequestRefused

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
