# SPDX-License-Identifier: Apache-2.0
"""Real-time chunking on the server (SERVING.md §12): what a request may ask (``RtcRequest``), the plan made
from its session's previous chunk (``rtc_plan``) or from the rows the client sent (``prefix_plan``: no server
memory, so a session continues on any replica), and those rows put on the prepared request (``attach_rtc``). The
samplers themselves are the port's (``common/rtc.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .exceptions import RequestRefused
from .sessions import LATENCY_WINDOW, Session


class RtcPrefix(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    normalized: list[list[float]] = Field(
        description="the previous chunk's rows still ahead of the robot, row 0 the next step it executes: those "
                    "rows of the previous response's action_pred_normalized [rows][action_dim]")
    actions: dict[str, list[list[float]]] = Field(
        description="the same rows of the previous response's physical actions, group -> [rows][dim]")


class RtcRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    variant: Literal["inpaint", "guided"] = Field(
        description="inpaint: the frozen prefix replaced at every Euler step; guided: soft-masked guidance towards "
                    "the previous chunk's remaining steps (a vector-Jacobian product through the DiT per step)")
    delay: int | None = Field(None, ge=0, le=1000, description="steps to freeze; default from the session's latency")
    beta: float | None = Field(None, gt=0, le=100, description="guided only: the guidance weight's clip (default 5)")
    prefix: RtcPrefix | None = Field(None, description="the previous chunk's remaining rows, sent by the client "
                                                       "instead of the session's stored chunk (needs delay)")


@dataclass
class RtcJob:
    """A planned RTC request: which rows of the previous chunk (``steps``) steer the new one, how (``variant``),
    how many of them are frozen outright, and that chunk as the plan read it (the session's, or the client's
    ``prefix`` with ``steps`` from its row 0)."""

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

    plan: dict = {"variant": variant, "frozen": 0, "offset": None, "delay": delay, "overlap": 0, "source": "session"}
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


def prefix_plan(prefix: RtcPrefix, delay: int, variant: str = "inpaint", beta: float | None = None):
    """``rtc_plan`` for rows the client sent (``RtcRequest.prefix``, checked by ``parse_rtc``): they start at the
    robot's next step, so ``offset = 0``, the overlap is all of them (guided) or the ``frozen = min(delay, rows)``
    first (inpaint), and no session is read. The job then takes the same path as a session's chunk."""
    from models.experimental.gr00t.common.rtc import DEFAULT_BETA

    rows = len(prefix.normalized)  # 1 … horizon (parse_rtc)
    frozen = min(delay, rows)
    overlap = rows if variant == "guided" else frozen
    plan: dict = {"variant": variant, "frozen": frozen, "offset": 0, "delay": delay, "overlap": overlap,
                  "source": "client"}
    if variant == "guided":
        plan["beta"] = DEFAULT_BETA if beta is None else float(beta)
    if overlap == 0:
        return {**plan, "reason": "delay 0: no step of the prefix to freeze"}, None
    job = RtcJob(variant, slice(0, overlap), frozen, plan.get("beta"), np.asarray(prefix.normalized, np.float32),
                 {k: np.asarray(v, np.float32) for k, v in prefix.actions.items()})
    return plan, job


def plan_request(rtc: RtcRequest, session: Session | None, arrived_at: float, horizon: int):
    """The plan of a parsed request's ``rtc``: from its ``prefix`` when it sent one, else from its session."""
    if rtc.prefix is not None:
        return prefix_plan(rtc.prefix, rtc.delay, rtc.variant, rtc.beta)
    return rtc_plan(session, arrived_at, rtc.delay, horizon, rtc.variant, rtc.beta)


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
            "prefix": "or rtc.prefix {normalized, actions} + rtc.delay: the previous chunk's remaining rows from the "
                      "client, no session needed",
            "delay": "the request's rtc.delay, else ceil(p90 of the session's last "
                     f"{LATENCY_WINDOW} server latencies x control_hz)", "section": "SERVING.md §12"}
    if len(runs) < len(VARIANTS):
        missing = ", ".join(v for v in VARIANTS if v not in runs)
        body["not_here"] = f"{missing}: not on this backend ({served})"
    return body


def _plain(value, depth: int = 0):
    """ndarrays and numpy scalars (msgpack-numpy on the wire protocols) → Python lists and numbers, so that the
    strict model reads them as it reads JSON (deeper than any valid ``rtc``, a value is left for it to refuse)."""
    if isinstance(value, np.ndarray):
        return value.tolist() if value.dtype.kind in "fiu" else value
    if isinstance(value, np.generic):
        return value.item()
    if depth > 6:
        return value
    if isinstance(value, dict):
        return {k: _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, depth + 1) for v in value]
    return value


def check_prefix(prefix: RtcPrefix, horizon: int, action_dim: int, action_dims: dict[str, int]) -> None:
    """The client's rows against the served chunk: 1 … ``horizon`` rows, ``action_dim`` wide in model space, the
    served groups with their dims in physical units, as many rows in both, all finite; else ``RequestRefused``."""
    rows = len(prefix.normalized)
    where = "rtc.prefix.normalized"
    if not 1 <= rows <= horizon:
        raise RequestRefused(where, f"has {rows} rows; send 1 to {horizon} (the horizon) rows still ahead")
    if any(len(r) != action_dim for r in prefix.normalized):
        raise RequestRefused(where, f"every row must have {action_dim} values (the model's action_dim)")
    with np.errstate(over="ignore"):
        if not np.isfinite(np.asarray(prefix.normalized, np.float32)).all():
            raise RequestRefused(where, "must be finite (as float32)")
    if set(prefix.actions) != set(action_dims):
        extra = sorted(set(prefix.actions) - set(action_dims))
        missing = sorted(set(action_dims) - set(prefix.actions))
        raise RequestRefused(f"rtc.prefix.actions.{(extra or missing)[0]}", f"{'unknown' if extra else 'missing'}"
                                                                            f" group; send {sorted(action_dims)}")
    for group, dim in action_dims.items():
        value, where = prefix.actions[group], f"rtc.prefix.actions.{group}"
        if len(value) != rows:
            raise RequestRefused(where, f"has {len(value)} rows; rtc.prefix.normalized has {rows}")
        if any(len(r) != dim for r in value):
            raise RequestRefused(where, f"every row must have {dim} values (the group's dim)")
        with np.errstate(over="ignore"):
            if not np.isfinite(np.asarray(value, np.float32)).all():
                raise RequestRefused(where, "must be finite (as float32)")


def parse_rtc(value, session_id, variants: tuple[str, ...], served: str, action_shape: tuple[int, int] | None = None,
              action_dims: dict[str, int] | None = None) -> RtcRequest | None:
    """The ``rtc`` field of a request on any protocol → ``RtcRequest`` or ``None``; raises ``RequestRefused``
    when it is malformed, has neither a session nor a ``prefix`` (with its ``delay``), its ``prefix`` does not fit
    the served chunk (``action_shape`` = (horizon, action_dim), ``action_dims`` per group), or the backend
    (running ``variants``, serving ``served``) cannot run it."""
    from pydantic import ValidationError

    if value is None:
        return None
    if not isinstance(value, RtcRequest):
        try:
            value = RtcRequest.model_validate(_plain(value))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in ("rtc", *first["loc"]))
            raise RequestRefused(where, first["msg"]) from None
    if value.beta is not None and value.variant != "guided":
        raise RequestRefused("rtc.beta", "only the guided variant takes beta")
    if value.prefix is None and session_id is None:
        raise RequestRefused("rtc", "needs session_id (the steered steps come from the session's previous chunk) "
                                    "or prefix (the client's own)")
    if value.prefix is not None:
        if value.delay is None:
            raise RequestRefused("rtc.delay", "required with prefix: the steps the robot executes from the prefix "
                                              "while this request is computed")
        if action_shape is None or action_dims is None:
            raise ValueError("parse_rtc needs action_shape and action_dims to check a prefix")
        check_prefix(value.prefix, *action_shape, action_dims)
    if value.variant not in variants:
        raise RequestRefused("rtc.variant", f"{value.variant} real-time chunking does not run on this backend "
                                            f"({served}); it runs: {', '.join(variants) or 'none'}")
    return value
