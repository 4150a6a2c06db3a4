# SPDX-License-Identifier: Apache-2.0
"""Request and response bodies of POST /predict (pydantic v2, strict types: no silent coercion of
strings to numbers). Semantic checks against the served layout (cameras, groups, sizes, token limit)
happen in ``common.observation`` and the backend's ``prepare``, before any device work. ``RtcRequest`` is the
core's (``rtc.py``): every protocol takes the same ``rtc`` field."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..rtc import RtcRequest

Floats = list[float]


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    images: dict[str, str | list[str]] = Field(description="camera -> base64 PNG/JPEG (or a list, one per frame)")
    state: dict[str, Floats | list[Floats]] = Field(description="group -> [[floats]] (one time step) or [floats]")
    instruction: str = Field(description="task text; over the layout's token limit is refused, never truncated")
    embodiment: str | None = Field(None, description="must equal the served embodiment when given")
    seed: int | None = Field(None, ge=0, le=2**63 - 1,
                             description="initial-noise seed (CPU generator); default per version")
    noise: list[Floats] | list[list[Floats]] | None = Field(None,
                                                            description="explicit initial noise [horizon][action_dim]")
    state_dtype: Literal["float64", "float32"] = "float64"
    return_normalized: bool = False
    session_id: str | None = Field(None, description="robot session (SERVING.md §12): 1-128 of A-Z a-z 0-9 . _ : -")
    seq: int | None = Field(None, ge=0, le=2**63 - 1,
                            description="must grow within a session: an older observation is refused (409)")
    control_hz: float | None = Field(None, gt=0, le=1000, description="the robot's control rate, kept per session")
    rtc: RtcRequest | None = Field(None, description="real-time chunking against the session's previous chunk, or "
                                                     "against the client's rtc.prefix (no server memory) (§12)")
    timeout_ms: int | None = Field(None, ge=1, le=3_600_000,
                                   description="deadline from the request's arrival: 504 if the device has not "
                                               "started by then (default GR00T_REQUEST_TIMEOUT_MS; never after "
                                               "device work began)")


class ImageReceipt(BaseModel):
    frames: int
    received_hw: list[int]


class PredictResponse(BaseModel):
    actions: dict[str, list[Floats]] = Field(description="group -> [horizon][dim], physical un-normalised targets")
    action_horizon: int
    action_keys: list[str]
    action_dims: dict[str, int]
    normalized: bool = Field(description="false: `actions` are in physical units")
    action_pred_normalized: list[Floats] | None = Field(None, description="model-space chunk, when return_normalized")
    embodiment: str
    embodiment_id: int
    version: str
    model: str
    layout: str
    images: dict[str, ImageReceipt]
    seq_len: int = Field(description="LLM prompt length of this request")
    prompt_tokens: int = Field(description="tokens of the rendered instruction")
    state_dtype: str
    noise_source: Literal["seed", "client"]
    seed: int | None
    weights: dict = Field(description="source, revision, synthetic flag of the served weights")
    backend: dict
    warning: str | None = None
    timing_ms: dict[str, float] = Field(description="decode, encode, device, decode_actions, total (server side)")
    batch_size: int | None = Field(None, description="with micro-batching only, when > 1: how many requests shared "
                                                     "the model call that computed this one (§13)")
    rtc: dict | None = Field(None, description="with rtc only: variant, delay, offset, frozen, overlap, source "
                                               "(session | client), beta for guided (and reason when 0)")
    session: dict | None = Field(None, description="with session_id only: id, seq, requests, control_hz, "
                                                   "latency_ms_p50 / _p90 of its recent requests (§12)")


class ResetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    session_id: str = Field(description="the session to forget")


class ErrorDetail(BaseModel):
    field: str | None = Field(description="the request field at fault (dotted path), or null")
    rule: str = Field(description="what the field must be, or why the request was refused")
    message: str
    errors: list[dict] | None = Field(None, description="every schema violation found (400 only)")
    retry_after_s: int | None = Field(None, description="429 only: the Retry-After header's value")


class ErrorBody(BaseModel):
    """The body of every non-2xx response."""

    error: ErrorDetail


ERROR_RESPONSES = {
    400: "malformed or off-contract request (never 422): `field` names it, `rule` says what it must be",
    401: "GR00T_API_KEY is set and `Authorization: Bearer <key>` is missing or wrong",
    408: "the body did not arrive within GR00T_BODY_TIMEOUT_S (the connection is closed)",
    409: "session_id with a seq not above the session's last one: an older observation is never computed",
    413: "body over GR00T_MAX_BODY_BYTES",
    429: "GR00T_MAX_QUEUE requests are already admitted; `Retry-After` says when to retry",
    500: "a server fault (logged; the body names only the exception type)",
    503: "not ready, shutting down, or the backend is lost (see /health)",
    504: "the request's deadline (timeout_ms / GR00T_REQUEST_TIMEOUT_MS) passed before the device started",
}
