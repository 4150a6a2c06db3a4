# SPDX-License-Identifier: Apache-2.0
"""Real-time chunking on the server (SERVING.md §12): what a request may ask (``RtcRequest``), the plan made
from its session's previous chunk (``rtc_plan``), and that chunk's rows put on the prepared request
(``attach_rtc``). The samplers themselves are the port's (``common/rtc.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .exceptions import RequestRefused
from .sessions import LATENCY_WINDOW, Session


class RtcRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    variant: Literal["inpaint", "guided"] = Field(
        description="inpaint: the frozen prefix replaced at every Euler step; guided: soft-masked guidance towards "
                    "the previous chunk's remaining steps (a vector-Jacobian product through the DiT per step)")
    delay: int | None = Field(None, ge=0, le=1000, description="steps to freeze; default from the session's latency")
    beta: float | None = Field(None, gt=0, le=100, description="guided only: the guidance weight's clip (default 5)")


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
    request's model space (``policy.frozen_prefix``, a policy's or a backend's: N1.7 re-expresses its absolute
    actions against the new state) as the inpainting prefix or as the guided target."""
    from models.experimental.gr00t.common.rtc import GuidedPrefix, InpaintPrefix

    rows = policy.frozen_prefix(job.last_normalized, job.last_actions, job.steps, inputs)
    horizon = int(inputs.noise.shape[1])
    if job.variant == "guided":
        inputs.guide = GuidedPrefix.build(rows, job.frozen, horizon, job.beta)
    else:
        inputs.inpaint = InpaintPrefix.build(rows, horizon)


def rtc_capabilities(variants: tuple[str, ...], served: str) -> dict:
    """What /info and the wire protocols' metadata say about real-time chunking on a backend that runs
    ``variants`` and serves ``served`` (its stage)."""
    from models.experimental.gr00t.common.rtc import DEFAULT_BETA, VARIANTS

    runs = [v for v in VARIANTS if v in variants]
    body = {"available": bool(runs), "variants": runs, "default_beta": DEFAULT_BETA,
            "needs": ["session_id", "control_hz"],
            "delay": "the request's rtc.delay, else ceil(p90 of the session's last "
                     f"{LATENCY_WINDOW} server latencies x control_hz)", "section": "SERVING.md §12"}
    if len(runs) < len(VARIANTS):
        missing = ", ".join(v for v in VARIANTS if v not in runs)
        body["not_here"] = f"{missing}: not on this backend ({served})"
    return body


def parse_rtc(value, session_id, variants: tuple[str, ...], served: str) -> RtcRequest | None:
    """The ``rtc`` field of a request on any protocol → ``RtcRequest`` or ``None``; raises ``RequestRefused``
    when it is malformed, has no session, or the backend (running ``variants``, serving ``served``) cannot
    run it."""
    from pydantic import ValidationError

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
    if value.variant not in variants:
        raise RequestRefused("rtc.variant", f"{value.variant} real-time chunking does not run on this backend "
                                            f"({served}); it runs: {', '.join(variants) or 'none'}")
    return value
