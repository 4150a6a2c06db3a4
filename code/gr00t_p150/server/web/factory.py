# SPDX-License-Identifier: Apache-2.0
"""The app factory and its lifespan: read the configuration, boot the engine (load, warm up, fidelity gate), open
the wire protocols' endpoints, install the signal handlers; only then "Application startup complete"."""

from __future__ import annotations

import asyncio
import logging
import sys
from contextlib import asynccontextmanager

from fastapi import FastAPI

from .. import memory, signals
from ..engine import Engine
from ..exceptions import BootError, SettingError
from ..runtime import Runtime
from ..service import Service
from ..settings import ServerConfig, load_config
from .guards import Guards
from .responses import register
from .routes import add_routes

log = logging.getLogger("gr00t_p150")


def _setup_logging() -> None:
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s gr00t_p150: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def create_app(config: ServerConfig | None = None) -> FastAPI:
    runtime = Runtime()
    service = Service(runtime)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        from ..wire import open_endpoints

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
            service.engine = engine
            runtime.metrics.booted(engine)
            app.state.endpoints = open_endpoints(cfg, service, asyncio.get_running_loop())
            signals.install(on_first=runtime.admission.drain, drain_timeout_s=cfg.drain_timeout_s)
        except (SettingError, BootError) as exc:
            log.error("Boot failed: %s", exc)
            if engine is not None:
                engine.shutdown()
            raise BootError(str(exc)) from None
        except Exception as exc:  # e.g. a bad tokenizer directory found during warm-up: still one clear line
            log.error("Boot failed: %s: %s", type(exc).__name__, exc)
            if engine is not None:
                engine.shutdown()
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
    app.state.service = service
    app.add_middleware(Guards, runtime=runtime)
    register(app)
    add_routes(app, service)
    app.openapi = lambda: _openapi(app)
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
