# SPDX-License-Identifier: Apache-2.0
"""Every HTTP error response in one place, in one shape: ``{"error": {"field", "rule", "message"}}``. The
status comes from the server's one refusal table (``refusals.py``: 400 off the contract, 409 an old ``seq``, 429
a full queue, 503 not ready / draining / lost, 504 a deadline passed before the device started, 500 a fault);
the HTTP-only ones are here: 400 for a body the schema refuses (never FastAPI's 422), and the guards' 401, 408
and 413."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..refusals import MAX_ECHO_CHARS, TABLE, Refusal, printable, refusal

log = logging.getLogger("gr00t_p150")


def error_body(status: int, field: str | None, rule: str, **extra) -> JSONResponse:
    field = printable(field) if field is not None else None
    rule = printable(rule, 4 * MAX_ECHO_CHARS)
    message = f"{field}: {rule}" if field else rule
    return JSONResponse({"error": {"field": field, "rule": rule, "message": message, **extra}}, status_code=status)


def refusal_response(r: Refusal) -> JSONResponse:
    response = error_body(r.status, r.field, r.rule, **r.extra)
    response.headers.update(r.headers)
    return response


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
        details = [{"field": printable("body" if e.get("type") == "json_invalid" else _loc(e.get("loc", ()))),
                    "rule": printable(e.get("msg", ""), 4 * MAX_ECHO_CHARS)} for e in errors[:20]]
        return error_body(400, field, first.get("msg", "invalid value"), errors=details)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        response = error_body(exc.status_code, None, str(exc.detail))
        response.headers.update(exc.headers or {})
        return response

    async def _refused(request: Request, exc: Exception) -> JSONResponse:
        """The refusal table's answer (a fault is logged there)."""
        return refusal_response(refusal(exc, f"{request.method} {request.url.path}"))

    for kind in TABLE:  # each type its own handler: answered in place, not re-raised as a server error
        app.add_exception_handler(kind, _refused)
    app.add_exception_handler(Exception, _refused)
