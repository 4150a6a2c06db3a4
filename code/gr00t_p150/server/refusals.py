# SPDX-License-Identifier: Apache-2.0
"""One table from every refusal type to what each protocol answers.

``refusal(exc)`` gives the HTTP status, the field at fault and the rule; HTTP writes them as
``{"error": {"field", "rule", "message"}}`` with that status (``web/responses.py``), NVIDIA's ZMQ protocol as
``{"error": "<field>: <rule>"}`` and openpi as a text frame with the same words (``Refusal.text``). A refusal
with no field (the queue, a server shutting down) names its topic on the wire instead. Anything not in the
table is a server fault: 500, logged with its traceback, and only its type is named to the client.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .exceptions import (DeadlineExpired, Draining, NonFiniteActions, NotServing, QueueFull, RequestRefused,
                         SessionConflict)

log = logging.getLogger("gr00t_p150")
MAX_ECHO_CHARS = 200  # how much of a client's own text (a key, a value) an error repeats


def printable(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """``text`` safe to echo: lone surrogates and control characters as ``\\uXXXX`` escapes (a JSON encoder
    cannot write a lone surrogate), and at most ``limit`` characters."""
    out = "".join(c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF else f"\\u{ord(c):04x}"
                  for c in text[:limit])
    return out + ("…" if len(text) > limit else "")


@dataclass(frozen=True)
class Refusal:
    status: int  # the HTTP status; the other protocols report it only in /metrics
    field: str | None  # the request field at fault (dotted path), or None
    rule: str  # what the field must be, or why the request was refused
    topic: str | None = None  # names a refusal without a field on the wire ("queue: …")
    headers: dict[str, str] = field(default_factory=dict)  # HTTP only
    extra: dict = field(default_factory=dict)  # more keys of HTTP's error body

    @property
    def text(self) -> str:
        """The wire protocols' words: ``"<field>: <rule>"``."""
        name = self.field or self.topic
        return f"{name}: {self.rule}" if name else self.rule


def _queue_full(exc: QueueFull) -> Refusal:
    return Refusal(429, None, str(exc), "queue", {"Retry-After": str(exc.retry_after_s)},
                   {"retry_after_s": exc.retry_after_s})


def _non_finite(exc: NonFiniteActions) -> Refusal:
    log.error("non-finite actions for a request (%s)", exc)
    return Refusal(500, None, "the model produced non-finite actions; see the server log")


def _field_rule(status: int):
    return lambda exc: Refusal(status, exc.field, exc.rule)


# exception type -> its refusal; the port's InputError and the codecs' WireError (both carry field and rule)
# are added on first use, so importing the server imports neither.
TABLE = {
    RequestRefused: _field_rule(400),
    SessionConflict: _field_rule(409),
    QueueFull: _queue_full,
    Draining: lambda exc: Refusal(503, None, str(exc), "server", {"Connection": "close"}),
    NotServing: lambda exc: Refusal(503, None, str(exc), "server"),
    DeadlineExpired: lambda exc: Refusal(504, "timeout_ms", str(exc)),
    NonFiniteActions: _non_finite,
}


_input_types_added = False


def _add_input_types() -> None:
    global _input_types_added
    from gr00t_client.codecs import WireError
    from models.experimental.gr00t.common.errors import InputError

    TABLE.setdefault(InputError, _field_rule(400))
    TABLE.setdefault(WireError, _field_rule(400))
    _input_types_added = True


def refusal(exc: BaseException, where: str = "a request") -> Refusal:
    """What to answer for ``exc``; an exception type not in the table is logged (with ``where``) as a fault."""
    if not _input_types_added:
        _add_input_types()
    for kind in type(exc).__mro__:
        if kind in TABLE:
            return TABLE[kind](exc)
    log.error("unexpected error on %s", where, exc_info=exc)
    return Refusal(500, None, f"internal error ({type(exc).__name__}); see the server log")
