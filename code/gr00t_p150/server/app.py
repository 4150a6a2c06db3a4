# SPDX-License-Identifier: Apache-2.0
"""FastAPI app: ``gr00t_p150.server.app:app``.

Importing this module loads no weights, opens no device and imports neither ttnn nor the port: the
configuration is read and the model loaded, warmed up and checked by the fidelity gate inside the
lifespan, so "Application startup complete" means ready to serve.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
import uuid
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from . import memory, signals
from .admission import DeadlineExpired
from .contract import model_name
from .demo import load_demo_request
from .engine import Engine
from .errors import BootError, NonFiniteActions, RequestRefused, as_request_refused, register
from .guards import Guards, Runtime
from .metrics import CONTENT_TYPE
from .schemas import ERROR_RESPONSES, ErrorBody, PredictRequest, PredictResponse, ResetRequest
from .sessions import attach_rtc, check_session_fields, parse_rtc, rtc_capabilities, rtc_plan
from .settings import ServerConfig, SettingError, load_config, parse_mesh_shape


def demo_note() -> str:
    from models.experimental.gr00t.common.quality import GOLDEN_FP32_ATOL, GOLDEN_FP32_GROUP_PCC_MIN

    return ("POST `request` to /predict; its actions equal `expected` up to the backend's precision. On the fp32 CPU "
            "reference they are bit-identical on the machine and software that computed `expected`, and within "
            f"max |d| {GOLDEN_FP32_ATOL:g} and PCC {GOLDEN_FP32_GROUP_PCC_MIN} per action group on another CPU "
            "(other ISAs pick other fp32 kernels).")

__all__ = ["app", "create_app", "load_config", "load_demo_request", "parse_mesh_shape"]

log = logging.getLogger("gr00t_p150")
SYNTHETIC_WARNING = "weights are SYNTHETIC (random): these actions are not a policy"
SMALL_REQUEST_BYTES = 2**20  # a body up to this size may be decoded on an idle device thread (Engine.prepare_and_run)


def _setup_logging() -> None:
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s gr00t_p150: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # what a client's X-Request-ID may be to be echoed


def request_id(sent: str | None) -> str:
    """The client's ``X-Request-ID`` when it is a plain token of at most 128 characters, else a fresh one."""
    return sent if sent and REQUEST_ID.fullmatch(sent) else uuid.uuid4().hex


def _release(engine: Engine | None) -> None:
    """A failed boot still closes what it opened (e.g. a TT device whose warm-up missed the gate)."""
    if engine is not None:
        engine.shutdown()


def _open_endpoints(cfg: ServerConfig, engine: Engine, loop, runtime: Runtime) -> list:
    """The binary protocols the configuration turns on (SERVING.md §11), each on its own port and thread, sharing
    ``/predict``'s admission queue and sessions."""
    admission = runtime.admission
    endpoints = []
    try:
        if cfg.zmq_port is not None:
            from .zmq_endpoint import ZmqPolicyEndpoint

            endpoints.append(ZmqPolicyEndpoint(engine, loop, host=cfg.zmq_host, port=cfg.zmq_port,
                                               api_key=cfg.api_key, allow_kill=cfg.zmq_allow_kill,
                                               max_bytes=cfg.max_body_bytes, admission=admission,
                                               sessions=runtime.sessions))
        if cfg.openpi_port is not None:
            from .openpi_endpoint import OpenpiPolicyEndpoint

            endpoints.append(OpenpiPolicyEndpoint(engine, loop, host=cfg.openpi_host, port=cfg.openpi_port,
                                                  api_key=cfg.api_key, max_bytes=cfg.max_body_bytes,
                                                  max_connections=cfg.max_queue, version=cfg.version,
                                                  admission=admission, sessions=runtime.sessions))
    except Exception as exc:  # e.g. the port is taken (OSError; ZMQError for the ZMQ socket)
        for endpoint in endpoints:
            endpoint.stop()
        raise BootError(f"could not open a protocol endpoint: {exc}") from None
    for endpoint in endpoints:
        endpoint.start()
    return endpoints


def create_app(config: ServerConfig | None = None) -> FastAPI:
    runtime = Runtime()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        _setup_logging()
        memory.limit_arenas()
        engine = None
        try:
            cfg = config or load_config()
            runtime.configure(cfg)
            from models.experimental.gr00t.common.host_threads import set_frame_workers  # the port: at boot

            set_frame_workers(cfg.frame_workers)
            engine = Engine(cfg, on_device_error=runtime.metrics.device_errors.inc)
            app.state.engine = engine
            await engine.start()
            runtime.metrics.booted(engine)
            app.state.endpoints = _open_endpoints(cfg, engine, asyncio.get_running_loop(), runtime)
            signals.install(on_first=runtime.admission.drain, drain_timeout_s=cfg.drain_timeout_s)
        except (SettingError, BootError) as exc:
            log.error("Boot failed: %s", exc)
            _release(engine)
            raise BootError(str(exc)) from None
        except Exception as exc:  # e.g. a bad tokenizer directory found during warm-up: still one clear line
            log.error("Boot failed: %s: %s", type(exc).__name__, exc)
            _release(engine)
            raise BootError(f"{type(exc).__name__}: {exc}") from exc
        try:
            yield
        finally:
            for endpoint in app.state.endpoints:
                endpoint.stop()
            engine.shutdown()

    app = FastAPI(title="GR00T policy server", version="0.1.0", lifespan=lifespan,
                  description="NVIDIA GR00T robot policy over HTTP (see SERVING.md).")
    app.state.runtime = runtime
    app.add_middleware(Guards, runtime=runtime)
    register(app)
    app.openapi = lambda: _openapi(app)

    def engine_of(request: Request) -> Engine:
        engine = getattr(request.app.state, "engine", None)
        if engine is None or not engine.ready:
            raise HTTPException(503, "model not ready")
        if engine.lost:
            raise HTTPException(503, "the backend is lost (see /health's last_device_error)")
        return engine

    errors = {code: {"model": ErrorBody, "description": text} for code, text in ERROR_RESPONSES.items()}

    @app.post("/predict", response_model=PredictResponse, response_model_exclude_none=True, responses=errors)
    async def predict(body: PredictRequest, request: Request):
        t0 = time.perf_counter()
        engine = engine_of(request)
        timeout_ms = body.timeout_ms or engine.config.request_timeout_ms
        deadline = request.scope.get("gr00t.arrived_at", t0) + timeout_ms / 1e3 if timeout_ms else None
        if deadline is not None and time.perf_counter() > deadline:
            raise DeadlineExpired("the request's deadline passed before its body had arrived and been parsed")
        check_session_fields(body.session_id, body.seq, body.control_hz)
        rtc = parse_rtc(body.rtc, body.session_id, engine.backend)  # before the session is claimed
        arrived_at = request.scope.get("gr00t.arrived_at", t0)
        session = None if body.session_id is None else runtime.sessions.claim(body.session_id, body.seq,
                                                                               body.control_hz)  # 409: never run
        plan, job = (None, None) if rtc is None else rtc_plan(
            session, arrived_at, rtc.delay, engine.backend.action_shape[0], rtc.variant, rtc.beta)

        def decode_and_prepare():  # all host work before the device, on one thread (Engine.prepare_and_run)
            obs = _decode(engine, body)
            t = time.perf_counter()
            prepared = engine.prepare(obs, noise=body.noise, seed=body.seed, state_dtype=body.state_dtype,
                                      deadline=deadline)
            if job is not None:  # RTC: the previous chunk's rows, in this request's model space
                attach_rtc(engine.backend.policy, job, prepared.inputs)
            return obs, t, prepared

        length = request.headers.get("content-length", "")  # h11 has checked it; absent when chunked: not small
        small = length.isdigit() and int(length) <= SMALL_REQUEST_BYTES
        (obs, t_decode, _), result = await engine.prepare_and_run(decode_and_prepare, deadline=deadline, small=small)
        response = _response(engine, body, obs, result)
        timing = {"decode": (t_decode - t0) * 1e3, **{k: v for k, v in result.timing_ms.items() if "." not in k}}
        timing["total"] = (time.perf_counter() - t0) * 1e3
        runtime.metrics.observe_stages(timing)
        if session is not None:
            runtime.sessions.record(session, result, timing["total"], observed_at=arrived_at)
            response["session"] = session.describe()
        if plan is not None:
            response["rtc"] = plan
        response["timing_ms"] = {k: round(v, 3) for k, v in timing.items()}
        headers = {"Server-Timing": ", ".join(f"{k};dur={v:.2f}" for k, v in timing.items()),
                   "X-Request-ID": request_id(request.headers.get("x-request-id"))}
        if obs.pixel_bytes() > memory.TRIM_AFTER_BYTES:
            del obs
            await run_in_threadpool(memory.trim)
        return JSONResponse(response, headers=headers)

    @app.post("/reset", responses={k: errors[k] for k in (400, 401)})
    async def reset(body: ResetRequest):
        """Forget a robot session (§12): its last seq, chunk and latencies."""
        check_session_fields(body.session_id, None, None)
        return {"session_id": body.session_id, "reset": runtime.sessions.reset(body.session_id)}

    @app.get("/health", responses={503: errors[503]})
    async def health(request: Request):
        """Always open (no key). 200 while the backend serves; 503 before it is ready, while it drains after
        SIGTERM, and once it is lost."""
        engine = getattr(request.app.state, "engine", None)
        if engine is None or not engine.ready and not engine.lost:
            raise HTTPException(503, "model not ready")
        admission = runtime.admission
        body = {"status": "lost" if engine.lost else "draining" if admission.draining else "ok",
                "version": engine.config.version,
                "weights_synthetic": bool(engine.weights and engine.weights.synthetic),
                "queue_depth": admission.depth, "queue_limit": admission.limit,
                "device_errors": engine.device_errors, "last_device_error": engine.last_device_error}
        return JSONResponse(body, status_code=503 if engine.lost or admission.draining else 200)

    @app.get("/metrics", response_class=Response)
    async def metrics():
        """Prometheus text exposition (requests, stage latencies, queue, warm-up and gate results)."""
        return Response(runtime.metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/info")
    async def info(request: Request):
        engine = engine_of(request)
        return {**engine.info(), "sessions": runtime.sessions.describe(), "rtc": rtc_capabilities(engine.backend),
                "protocols": {"http": True, "zmq": runtime.config.zmq_port, "openpi": runtime.config.openpi_port}}

    @app.get("/demo")
    async def demo(request: Request):
        engine = engine_of(request)
        golden = engine.golden
        return {"request": load_demo_request(engine.config.version),
                "expected": {"actions": golden["actions"], "action_pred_normalized": golden["action_pred_normalized"]},
                "expected_source": engine.golden_source,
                "expected_weights": golden.get("weights"),
                "note": demo_note()}

    @app.get("/v1/models")
    async def models(request: Request):
        engine = getattr(request.app.state, "engine", None)
        version = engine.config.version if engine else "unknown"
        return {"object": "list", "data": [{"id": model_name(version), "object": "model",
                                            "owned_by": "nvidia", "ready": bool(engine and engine.ready)}]}

    return app


def _openapi(app: FastAPI) -> dict:
    """FastAPI's schema without its stock 422 (this server answers every validation error with 400)."""
    from fastapi.openapi.utils import get_openapi

    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                operation.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(name, None)
        app.openapi_schema = schema
    return app.openapi_schema


def _decode(engine: Engine, body: PredictRequest):
    """Request → ``Observation``: every field checked against the served layout, images decoded."""
    from models.experimental.gr00t.common.observation import parse_observation

    if body.embodiment is not None and body.embodiment != engine.layout.embodiment:
        raise RequestRefused("embodiment",
                             f"unknown embodiment {body.embodiment!r}; this server serves {engine.layout.embodiment!r}")
    if body.noise is not None and body.seed is not None:
        raise RequestRefused("noise", "give either noise or seed, not both")
    with as_request_refused():
        return parse_observation(body.model_dump(include={"images", "state", "instruction"}), engine.layout)


def _response(engine: Engine, body: PredictRequest, obs, result) -> dict:
    import numpy as np

    from models.experimental.gr00t.common.policy import result_to_json

    lay = engine.layout
    if not all(np.isfinite(a).all() for a in result.actions.values()):
        raise NonFiniteActions(f"seed={result.seed}, noise_source={result.noise_source}")
    weights, backend = engine.weights, engine.backend.describe()  # described once per response
    answer = result_to_json(result, normalized=body.return_normalized)
    out = {
        "actions": answer["actions"],
        "action_horizon": int(result.action_pred.shape[0]),
        "action_keys": lay.action_keys,
        "action_dims": lay.action_dims,
        "normalized": False,
        "embodiment": lay.embodiment,
        "embodiment_id": lay.embodiment_id,
        "version": engine.config.version,
        "model": model_name(engine.config.version),
        "layout": lay.name,
        "images": obs.received_hw(),
        "seq_len": result.seq_len,
        "prompt_tokens": result.prompt_tokens,
        "state_dtype": body.state_dtype,
        "noise_source": result.noise_source,
        "seed": result.seed,
        "weights": {"source": weights.source, "revision": weights.revision, "synthetic": weights.synthetic is not None},
        "backend": {k: v for k, v in backend.items() if k in ("name", "device", "dtype", "mock")},
    }
    if result.batch_size > 1:  # micro-batching: the model call this answer shared (§13)
        out["batch_size"] = result.batch_size
    if body.return_normalized:
        out["action_pred_normalized"] = answer["action_pred_normalized"]
    warnings = [w for w in (backend.get("warning"),
                            SYNTHETIC_WARNING if weights.synthetic is not None else None) if w]
    if warnings:
        out["warning"] = "; ".join(warnings)
    return out


app = create_app()
