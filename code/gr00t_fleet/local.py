# SPDX-License-Identifier: Apache-2.0
"""A fleet on this machine, for the tests, ``make fleet-demo`` and ``make bench-fleet``: a free loopback port, a local
Ray cluster with Serve's HTTP proxy on it, and its shutdown with a check that none of its processes is left."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_under(marker: str) -> list[int]:
    """PIDs of live processes (not this one; zombies are gone already, only not yet reaped) whose command line
    mentions ``marker``: Ray's temp dir is on every one of its processes'."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if marker in cmd and ") Z " not in stat:
                pids.append(int(entry.name))
    return pids


def start_local(temp_dir: str, port: int, num_cpus: int = 2) -> str:
    """A local Ray cluster of ``num_cpus`` CPUs (temp dir ``temp_dir``: short, Ray's socket paths must fit 107
    bytes) and Serve's HTTP proxy on 127.0.0.1:``port``; returns the proxy's URL. Token auth is off unless
    ``RAY_AUTH_MODE`` says otherwise (a loopback-only cluster)."""
    import ray
    from ray import serve

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, _temp_dir=temp_dir)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    return f"http://127.0.0.1:{port}"


def stop_local(temp_dir: str, wait_s: float = 30.0) -> list[int]:
    """``serve shutdown`` (every replica drained and its backend closed), then Ray; waits up to ``wait_s`` for the
    cluster's processes to end and returns those still running (none, normally)."""
    import ray
    from ray import serve

    if ray.is_initialized():  # serve.shutdown() on no cluster would start one to find nothing there
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
    deadline = time.time() + wait_s
    while (left := processes_under(temp_dir)) and time.time() < deadline:
        time.sleep(0.5)
    return left
