# SPDX-License-Identifier: Apache-2.0
"""Every error response in one place: 400 names the field and the rule, 413 for oversize bodies, 503
before the model is ready, 500 (logged) for anything unexpected."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

log = logging.getLogger("gr00t_p150")


def error_body(status: int, field: str | None, rule: str, **extra) -> JSONResponse:
    message = f"{field}: {rule}" if field else rule
    return JSONResponse({"error": {"field": field, "rule": rule, "message": message, **extra}}, status_code=status)


_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list"}


def _loc(loc) -> str:
    """pydantic's location → a client's field path (drops ``body`` and union-branch tags such as
    ``list[float]``)."""
    parts = [str(p) for p in loc if p != "body" and str(p) not in _TYPE_TAGS and "[" not in str(p)]
    return ".".join(parts) if parts else "body"


def register(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
        field = _loc(first.get("loc", ()))
        if first.get("type") == "json_invalid":
            field = "body"
        details = [{"field": "body" if e.get("type") == "json_invalid" else _loc(e.get("loc", ())), "rule": e.get("msg", "")}
                   for e in errors[:20]]
        return error_body(400, field, first.get("msg", "invalid value"), errors=details)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return error_body(exc.status_code, None, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_body(500, None, f"internal error ({type(exc).__name__}); see the server log")


def input_error_response(exc) -> JSONResponse:
    """An ``InputError`` from the port's validation → 400."""
    return error_body(400, exc.field, exc.rule)
