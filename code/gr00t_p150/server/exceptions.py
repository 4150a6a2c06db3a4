# SPDX-License-Identifier: Apache-2.0
"""Every exception type the server raises, in one module (``refusals.py`` maps each to every protocol's error
form). Imports nothing of the port: importing the server must stay free of it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from starlette.exceptions import HTTPException


class BootError(RuntimeError):
    """The server must not start; the message says why."""


class SettingError(ValueError):
    """A configuration value that cannot be used; the message names the variable."""


class WeightsError(RuntimeError):
    """Weights that cannot be had: the message says what to do."""


class RequestRefused(Exception):
    """A request off the contract (the port's ``InputError`` as the server raises it): 400 over HTTP.

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


class SessionConflict(Exception):
    """An observation older than the session's last one (``seq`` not increasing): 409, never computed."""

    def __init__(self, session_id: str, seq: int, last: int):
        super().__init__(f"seq {seq} is not after this session's last seq {last}: an older observation is never "
                         f"computed (send a larger seq, or reset the session)")
        self.field, self.rule = "seq", str(self)
        self.session_id, self.seq, self.last = session_id, seq, last


class QueueFull(Exception):
    """The server already holds ``GR00T_MAX_QUEUE`` requests: 429 with ``Retry-After``."""

    def __init__(self, depth: int, retry_after_s: int):
        super().__init__(f"the server is at GR00T_MAX_QUEUE ({depth} requests admitted); retry in "
                         f"{retry_after_s} s")
        self.retry_after_s = retry_after_s


class Draining(Exception):
    """SIGTERM received: requests that arrived before it are answered, later ones get 503."""


class NotServing(Exception):
    """The model is not ready yet, or the backend is lost: 503."""


class DeadlineExpired(Exception):
    """The request's deadline passed before the device started on it: 504 (never after device work began)."""


class NonFiniteActions(RuntimeError):
    """The model produced NaN or infinite actions for a request: 500, logged."""


class BodyTooLarge(HTTPException):
    """HTTP only: the body exceeds ``GR00T_MAX_BODY_BYTES`` (413, refused by the guards before it is parsed)."""

    def __init__(self, limit: int):
        super().__init__(413, f"request body exceeds GR00T_MAX_BODY_BYTES ({limit} bytes)")


class BodyTooSlow(HTTPException):
    """HTTP only: the body did not arrive within ``GR00T_BODY_TIMEOUT_S`` (408; the connection is closed)."""

    def __init__(self, limit_s: float):
        super().__init__(408, f"the request body did not arrive within GR00T_BODY_TIMEOUT_S ({limit_s:g} s)",
                         headers={"Connection": "close"})
