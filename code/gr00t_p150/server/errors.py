# SPDX-License-Identifier: Apache-2.0
"""Every error response in one place: 400 names the field and the rule, 401 without the API key, 408 for a
body too slow, 413 for one too large, 429 for a full queue, 503 before the model is ready or after it is
lost, 504 for a deadline that passed before the device started, 500 (logged) for anything unexpected."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from .admission import DeadlineExpired
from .sessions import SessionConflict

log = logging.getLogger("gr00t_p150")


class BootError(RuntimeError):
    """The server must not start; the message says why."""


class RequestRefused(Exception):
    """A request the port's validation refused (its ``InputError``), as the server raises it -> 400.

    The port's own error type is not imported here: importing the app must not import the port."""

    def __init__(self, field: str, rule: str):
        super().__init__(f"{field}: {rule}")
        self.field, self.rule = field, rule


@contextmanager
def as_request_refused() -> Iterator[None]:
    """Raise the port's ``InputError`` as ``RequestRefused`` (imported here, when a request is served)."""
    from models.experimental.gr00t.common.errors import InputError

    try:
        yield
    except InputError as exc:
        raise RequestRefused(exc.field, exc.rule) from None


class NonFiniteActions(RuntimeError):
    """The model produced NaN or infinite actions for a request -> 500, logged."""


MAX_ECHO_CHARS = 200  # how much of a client's own text (a key, a value) an error body repeats


def printable(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """``text`` safe to echo: lone surrogates and control characters as ``\\uXXXX`` escapes (a JSON encoder
    cannot write a lone surrogate), and at most ``limit`` characters."""
    out = "".join(c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF else f"\\u{ord(c):04x}"
                  for c in text[:limit])
    return out + ("…" if len(text) > limit else "")


def error_body(status: int, field: str | None, rule: str, **extra) -> JSONResponse:
    field = printable(field) if field is not None else None
    rule = printable(rule, 4 * MAX_ECHO_CHARS)
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
        details = [{"field": printable("body" if e.get("type") == "json_invalid" else _loc(e.get("loc", ()))),
                    "rule": printable(e.get("msg", ""), 4 * MAX_ECHO_CHARS)} for e in errors[:20]]
        return error_body(400, field, first.get("msg", "invalid value"), errors=details)

    @app.exception_handler(RequestRefused)
    async def _refused(_: Request, exc: RequestRefused) -> JSONResponse:
        return error_body(400, exc.field, exc.rule)

    @app.exception_handler(SessionConflict)
    async def _conflict(_: Request, exc: SessionConflict) -> JSONResponse:
        return error_body(409, exc.field, exc.rule)

    @app.exception_handler(NonFiniteActions)
    async def _non_finite(_: Request, exc: NonFiniteActions) -> JSONResponse:
        log.error("non-finite actions for a request (%s)", exc)
        return error_body(500, None, "the model produced non-finite actions; see the server log")

    @app.exception_handler(DeadlineExpired)
    async def _deadline(_: Request, exc: DeadlineExpired) -> JSONResponse:
        return error_body(504, "timeout_ms", str(exc))

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        response = error_body(exc.status_code, None, str(exc.detail))
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_body(500, None, f"internal error ({type(exc).__name__}); see the server log")
