# SPDX-License-Identifier: Apache-2.0
"""SIGTERM / SIGINT under uvicorn: the first drains and exits 0, a second exits at once.

uvicorn's own handler drains too, but then re-raises the signal so the process ends with status 143
(130 for SIGINT) even after a clean drain, and a second SIGTERM does not cut the drain short. Here the
first signal tells uvicorn to stop the way its programmatic API does (``server.should_exit``), so the
process returns 0 once in-flight requests are answered and the backend is closed; admission refuses new
work with 503 meanwhile. A watchdog ends the process (status 1) if the drain takes longer than
``GR00T_DRAIN_TIMEOUT_S``; a second signal ends it at once with 128 + the signal number.

Installed from the lifespan, which uvicorn runs on the main thread after installing its handler. Under
anything else (a test client's thread, another server) nothing is installed.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

log = logging.getLogger("gr00t_p150")
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def install(on_first: Callable[[], None], drain_timeout_s: float) -> bool:
    """Wrap uvicorn's handlers; returns whether they were installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    received: list[int] = []
    installed = False
    for sig in SIGNALS:
        previous = signal.getsignal(sig)
        server = getattr(previous, "__self__", None)
        if not callable(previous) or not hasattr(server, "should_exit"):
            continue

        def handler(signum, frame, previous=previous, server=server):
            received.append(signum)
            if len(received) > 1:
                log.warning("%s again: exiting now, without waiting for the drain", signal.Signals(signum).name)
                os._exit(128 + signum)
            log.info("%s: draining in-flight requests (at most %g s), then exiting", signal.Signals(signum).name,
                     drain_timeout_s)
            on_first()
            watchdog = threading.Timer(drain_timeout_s, _drain_overran, args=(drain_timeout_s,))
            watchdog.daemon = True
            watchdog.start()
            server.should_exit = True

        signal.signal(sig, handler)
        installed = True
    return installed


def _drain_overran(limit_s: float) -> None:
    log.error("the drain took longer than GR00T_DRAIN_TIMEOUT_S (%g s): exiting with status 1", limit_s)
    os._exit(1)
