# SPDX-License-Identifier: Apache-2.0
"""The SIGTERM drain check: requests in flight, then SIGTERM (once, or twice): are they answered, and how and
when does the process exit."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time

from .client import Client, Outcome
from .hostile import Corpus
from .judge import Stats
from .process import Server, format_exit


def run_sigterm(server: Server, corpus: Corpus, args, n_requests: int, double: bool) -> dict:
    """``n_requests`` valid requests in flight, then SIGTERM (twice when ``double``)."""
    stats = Stats("sigterm")
    rng = random.Random(f"{args.seed}:sigterm:{n_requests}")
    specs = [corpus.valid(rng) for _ in range(n_requests)]
    outcomes: list[Outcome | None] = [None] * n_requests

    def send(k: int) -> None:
        outcomes[k] = Client("127.0.0.1", server.port, args.timeout, args.api_key).send(specs[k])

    threads = [threading.Thread(target=send, args=(k,), daemon=True) for k in range(n_requests)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    t_signal = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    if double:
        time.sleep(0.1)
        server.proc.send_signal(signal.SIGTERM)
    try:
        server.proc.wait(timeout=args.exit_timeout)
        exit_s = round(time.monotonic() - t_signal, 2)
    except subprocess.TimeoutExpired:
        exit_s = None
        server.proc.kill()
        server.proc.wait()
    for t in threads:
        t.join(timeout=args.timeout + 5)
    labels = []
    for spec, outcome in zip(specs, outcomes, strict=True):
        outcome = outcome or Outcome(error="HANG")
        stats.record(spec, outcome, shutdown=True)
        labels.append(outcome.error or outcome.status)
    rc = server.proc.returncode if exit_s is not None else None
    return {"requests": n_requests, "signals": 2 if double else 1, "statuses": labels,
            "all_200": all(label == 200 for label in labels), "exit_s": exit_s, "returncode": rc,
            "exit_status": format_exit(rc) + ("" if exit_s is not None else " (killed with SIGKILL)"),
            "failures": dict(stats.failures), "failure_examples": stats.examples}
