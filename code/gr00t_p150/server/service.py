# SPDX-License-Identifier: Apache-2.0
"""The one request path. Every protocol turns its message into a ``PolicyRequest`` and hands it to
``Service.serve``, which owns, once: readiness, the deadline, the session check and claim, the RTC plan,
admission (for the doors that have not admitted the request already), decode + prepare on the thread the engine
chooses, the run (alone or micro-batched), the finite check, the session record, the metrics and the memory trim.
It returns an ``Answer`` or raises one of ``exceptions.py``'s types, which ``refusals.py`` maps to each
protocol's error form. The adapters (``web/routes.py``, ``wire/``) only translate.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from . import memory
from .exceptions import DeadlineExpired, NonFiniteActions, NotServing, RequestRefused, as_request_refused
from .refusals import refusal
from .rtc import parse_rtc, plan_request, rtc_capabilities
from .runtime import Runtime
from .sessions import check_session_fields

SMALL_REQUEST_BYTES = 2**20  # a body up to this size may be decoded on an idle device thread (Engine.prepare_and_run)
PROTOCOLS = ("http", "zmq", "openpi")


@dataclass
class PolicyRequest:
    """One observation to act on, whichever protocol brought it."""

    protocol: str  # one of PROTOCOLS
    observation: dict  # {"images": {camera: base64 text | uint8 frames}, "state": {...}, "instruction": text}
    seed: int | None = None
    noise: Any = None  # [horizon][action_dim] floats
    embodiment: str | None = None  # must equal the served one when given
    state_dtype: str = "float64"
    session_id: str | None = None
    seq: int | None = None
    control_hz: float | None = None
    rtc: Any = None  # an rtc.RtcRequest or its map
    timeout_ms: int | None = None  # None: GR00T_REQUEST_TIMEOUT_MS
    return_normalized: bool = False
    arrived_at: float = field(default_factory=time.perf_counter)  # perf_counter at the door
    size: int | None = None  # the message's bytes (None: unknown, e.g. a chunked HTTP body)


@dataclass
class Answer:
    result: Any  # common.policy.PolicyResult
    images: dict  # what was received per camera (frames, size): common.observation.Observation.received_hw()
    timing_ms: dict[str, float]
    session: dict | None = None  # the session's description, with session_id
    rtc: dict | None = None  # the RTC plan, with rtc


def check_seed(seed) -> None:
    """The seed rule of every protocol (HTTP's schema says the same before it gets here)."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise RequestRefused("seed", "must be an integer in [0, 2^63)")


def decode_request(engine, request: PolicyRequest):
    """The request's observation → ``Observation``: every field checked against the served layout, images
    decoded."""
    from models.experimental.gr00t.common.observation import parse_observation

    layout = engine.layout
    if request.embodiment is not None and request.embodiment != layout.embodiment:
        raise RequestRefused("embodiment",
                             f"unknown embodiment {request.embodiment!r}; this server serves {layout.embodiment!r}")
    with as_request_refused():
        return parse_observation(request.observation, layout)


class Service:
    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.engine = None  # set once booted (the lifespan)

    def serving_engine(self):
        """The engine, when it serves; else ``NotServing`` (503)."""
        engine = self.engine
        if engine is None or not engine.ready:
            raise NotServing("model not ready")
        if engine.lost:
            raise NotServing("the backend is lost (see /health's last_device_error)")
        return engine

    def rtc_capabilities(self) -> dict:
        return rtc_capabilities(self.engine.rtc_variants, self.engine.stage)

    async def serve(self, request: PolicyRequest, *, admitted: bool = False) -> Answer:
        """``request`` through the model. ``admitted``: the door holds the request's admission place already (HTTP's
        guards take it before the body is parsed, so that a full queue costs a client nothing)."""
        if admitted:
            return await self._serve(request)
        at = self.runtime.admit()
        try:
            return await self._serve(request)
        finally:
            self.runtime.release(at)

    async def _serve(self, request: PolicyRequest) -> Answer:
        t0 = time.perf_counter()
        engine = self.serving_engine()
        timeout_ms = request.timeout_ms or engine.config.request_timeout_ms
        deadline = request.arrived_at + timeout_ms / 1e3 if timeout_ms else None
        if deadline is not None and time.perf_counter() > deadline:
            raise DeadlineExpired("the request's deadline passed before its body had arrived and been parsed")
        check_seed(request.seed)
        with as_request_refused():
            from models.experimental.gr00t.common.policy import check_noise_or_seed

            check_noise_or_seed(request.noise, request.seed)
        check_session_fields(request.session_id, request.seq, request.control_hz)
        rtc = None if request.rtc is None else parse_rtc(request.rtc, request.session_id, engine.rtc_variants,
                                                         engine.stage, engine.action_shape, engine.layout.action_dims)
        sessions = self.runtime.sessions  # rtc was checked before the session is claimed
        session = None if request.session_id is None else sessions.claim(request.session_id, request.seq,
                                                                          request.control_hz)  # 409: never run
        plan, job = (None, None) if rtc is None else plan_request(rtc, session, request.arrived_at,
                                                                  engine.action_shape[0])

        def decode_and_prepare():  # all host work before the device, on one thread (Engine.prepare_and_run)
            obs = decode_request(engine, request)
            t = time.perf_counter()
            prepared = engine.prepare(obs, noise=request.noise, seed=request.seed, state_dtype=request.state_dtype,
                                      deadline=deadline)
            if job is not None:  # RTC: the previous chunk's rows (session's or client's), in this request's model space
                engine.attach_rtc(job, prepared)
            return obs, t, prepared

        small = request.size is not None and request.size <= SMALL_REQUEST_BYTES
        (obs, t_decode, _), result = await engine.prepare_and_run(decode_and_prepare, deadline=deadline, small=small)
        import numpy as np

        if not all(np.isfinite(a).all() for a in result.actions.values()):
            raise NonFiniteActions(f"seed={result.seed}, noise_source={result.noise_source}")
        timing = {"decode": (t_decode - t0) * 1e3, **{k: v for k, v in result.timing_ms.items() if "." not in k}}
        timing["total"] = (time.perf_counter() - t0) * 1e3
        self.runtime.metrics.observe_stages(timing, request.protocol)
        answer = Answer(result, obs.received_hw(), timing, rtc=plan)
        if session is not None:
            sessions.record(session, result, timing["total"], observed_at=request.arrived_at)
            answer.session = session.describe()
        if obs.pixel_bytes() > memory.TRIM_AFTER_BYTES:  # hand a large request's freed pages back
            del obs
            await asyncio.get_running_loop().run_in_executor(None, memory.trim)
        return answer

    def serve_blocking(self, request: PolicyRequest, loop: asyncio.AbstractEventLoop,
                       timeout_s: float = 600.0) -> Answer:
        """``serve`` from a wire endpoint's own thread: run on the server's event loop, waited for here."""
        return asyncio.run_coroutine_threadsafe(self.serve(request), loop).result(timeout_s)

    def answered(self, protocol: str, exc: BaseException | None = None, where: str = "a request"):
        """Count an action request's outcome by protocol; for a failure, also its ``Refusal`` (a fault is
        logged)."""
        found = None if exc is None else refusal(exc, where)
        self.runtime.metrics.answered(protocol, 200 if found is None else found.status)
        return found

    def info(self) -> dict[str, Any]:
        """/info: what is served, how it was chosen, booted and checked, and what the server keeps."""
        import platform
        import statistics

        import torch
        import transformers

        from .contract import contract, model_name

        engine, rt = self.serving_engine(), self.runtime
        b, c = engine.booted, engine.config
        return {
            "version": c.version,
            "model": model_name(c.version),
            "ready": engine.ready,
            "stage": engine.stage,
            "contract": contract(c, b.layout, *engine.action_shape),
            "weights": b.weights.to_dict(),
            "backend": {**engine.describe_backend(), "selection": engine.selection},
            "warmup": {"runs": len(b.warmup_ms), "median_ms": statistics.median(b.warmup_ms) if b.warmup_ms else None,
                       "all_ms": [round(x, 2) for x in b.warmup_ms]},
            "fidelity": b.fidelity_info(),
            "batching": engine.batching_info(),
            "boot_s": round(b.boot_s, 2),
            "config": c.to_dict(),
            "software": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__},
            "sessions": rt.sessions.describe(),
            "rtc": self.rtc_capabilities(),
            "protocols": {"http": True, "zmq": c.zmq_port, "openpi": c.openpi_port},
        }
