# SPDX-License-Identifier: Apache-2.0
"""The HTTP routes. ``/predict`` is an adapter: its JSON body becomes a ``PolicyRequest``, the service serves it,
and the ``Answer`` becomes the response body (``predict_body``); everything else reads what the server keeps."""

from __future__ import annotations

import re
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ..contract import model_name
from ..exceptions import NotServing
from ..metrics import CONTENT_TYPE
from ..service import Answer, PolicyRequest, Service
from ..sessions import check_session_fields
from .schemas import ERROR_RESPONSES, ErrorBody, PredictRequest, PredictResponse, ResetRequest

SYNTHETIC_WARNING = "weights are SYNTHETIC (random): these actions are not a policy"
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # what a client's X-Request-ID may be to be echoed


def request_id(sent: str | None) -> str:
    """The client's ``X-Request-ID`` when it is a plain token of at most 128 characters, else a fresh one."""
    return sent if sent and REQUEST_ID.fullmatch(sent) else uuid.uuid4().hex


def demo_note() -> str:
    from models.experimental.gr00t.common.quality import GOLDEN_FP32_ATOL, GOLDEN_FP32_GROUP_PCC_MIN

    return ("POST `request` to /predict; its actions equal `expected` up to the backend's precision. On the fp32 CPU "
            "reference they are bit-identical on the machine and software that computed `expected`, and within "
            f"max |d| {GOLDEN_FP32_ATOL:g} and PCC {GOLDEN_FP32_GROUP_PCC_MIN} per action group on another CPU "
            "(other ISAs pick other fp32 kernels).")


def policy_request(body: PredictRequest, request: Request) -> PolicyRequest:
    """The JSON body → the service's request (arrival time from the guards; the size from Content-Length, which
    h11 has checked; unknown for a chunked body)."""
    length = request.headers.get("content-length", "")
    return PolicyRequest(
        "http", body.model_dump(include={"images", "state", "instruction"}), seed=body.seed, noise=body.noise,
        embodiment=body.embodiment, state_dtype=body.state_dtype, session_id=body.session_id, seq=body.seq,
        control_hz=body.control_hz, rtc=body.rtc, timeout_ms=body.timeout_ms, return_normalized=body.return_normalized,
        arrived_at=request.scope["gr00t.arrived_at"], size=int(length) if length.isdigit() else None)


def predict_body(engine, request: PolicyRequest, answer: Answer) -> dict:
    """An ``Answer`` → /predict's JSON body (``PredictResponse``)."""
    from models.experimental.gr00t.common.policy import result_to_json

    lay, result = engine.layout, answer.result
    weights, backend = engine.weights, engine.describe_backend()  # described once per response
    out = result_to_json(result, normalized=request.return_normalized)
    body = {
        "actions": out["actions"],
        "action_horizon": int(result.action_pred.shape[0]),
        "action_keys": lay.action_keys,
        "action_dims": lay.action_dims,
        "normalized": False,
        "embodiment": lay.embodiment,
        "embodiment_id": lay.embodiment_id,
        "version": engine.config.version,
        "model": model_name(engine.config.version),
        "layout": lay.name,
        "images": answer.images,
        "seq_len": result.seq_len,
        "prompt_tokens": result.prompt_tokens,
        "state_dtype": request.state_dtype,
        "noise_source": result.noise_source,
        "seed": result.seed,
        "weights": {"source": weights.source, "revision": weights.revision, "synthetic": weights.synthetic is not None},
        "backend": {k: v for k, v in backend.items() if k in ("name", "device", "dtype", "mock")},
    }
    if result.batch_size > 1:  # micro-batching: the model call this answer shared (§13)
        body["batch_size"] = result.batch_size
    if request.return_normalized:
        body["action_pred_normalized"] = out["action_pred_normalized"]
    warnings = [w for w in (backend.get("warning"), SYNTHETIC_WARNING if weights.synthetic is not None else None) if w]
    if warnings:
        body["warning"] = "; ".join(warnings)
    if answer.session is not None:
        body["session"] = answer.session
    if answer.rtc is not None:
        body["rtc"] = answer.rtc
    body["timing_ms"] = {k: round(v, 3) for k, v in answer.timing_ms.items()}
    return body


def add_routes(app: FastAPI, service: Service) -> None:
    runtime = service.runtime
    errors = {code: {"model": ErrorBody, "description": text} for code, text in ERROR_RESPONSES.items()}

    @app.post("/predict", response_model=PredictResponse, response_model_exclude_none=True, responses=errors)
    async def predict(body: PredictRequest, request: Request):
        wanted = policy_request(body, request)
        answer = await service.serve(wanted, admitted=True)  # the guards admitted it before parsing the body
        headers = {"Server-Timing": ", ".join(f"{k};dur={v:.2f}" for k, v in answer.timing_ms.items()),
                   "X-Request-ID": request_id(request.headers.get("x-request-id"))}
        return JSONResponse(predict_body(service.engine, wanted, answer), headers=headers)

    @app.post("/reset", responses={k: errors[k] for k in (400, 401)})
    async def reset(body: ResetRequest):
        """Forget a robot session (§12): its last seq, chunk and latencies."""
        check_session_fields(body.session_id, None, None)
        return {"session_id": body.session_id, "reset": runtime.sessions.reset(body.session_id)}

    @app.get("/health", responses={503: errors[503]})
    async def health():
        """Always open (no key). 200 while the backend serves; 503 before it is ready, while it drains after
        SIGTERM, and once it is lost."""
        engine = service.engine
        if engine is None or not engine.ready and not engine.lost:
            raise NotServing("model not ready")
        admission = runtime.admission
        body = {"status": "lost" if engine.lost else "draining" if admission.draining else "ok",
                "version": engine.config.version,
                "weights_synthetic": bool(engine.weights and engine.weights.synthetic),
                "queue_depth": admission.depth, "queue_limit": admission.limit,
                "device_errors": engine.device_errors, "last_device_error": engine.last_device_error}
        return JSONResponse(body, status_code=503 if engine.lost or admission.draining else 200)

    @app.get("/metrics", response_class=Response)
    async def metrics():
        """Prometheus text exposition (requests of every protocol, stage latencies, queue, warm-up and gate)."""
        return Response(runtime.metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/info")
    async def info():
        return service.info()

    @app.get("/demo")
    async def demo():
        from models.experimental.gr00t.common.demo import load_demo_request

        engine = service.serving_engine()
        golden, booted = engine.booted.golden, engine.booted
        return {"request": load_demo_request(engine.config.version, engine.config.layout),
                "expected": {"actions": golden["actions"], "action_pred_normalized": golden["action_pred_normalized"]},
                "expected_source": booted.golden_source,
                "expected_weights": golden.get("weights"),
                "note": demo_note()}

    @app.get("/v1/models")
    async def models():
        engine = service.engine
        version = engine.config.version if engine else "unknown"
        return {"object": "list", "data": [{"id": model_name(version), "object": "model",
                                            "owned_by": "nvidia", "ready": bool(engine and engine.ready)}]}
