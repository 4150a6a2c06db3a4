# SPDX-License-Identifier: Apache-2.0
"""The fleet under test: a real local Ray cluster (2 CPUs) serving the fleet application, 2 CPU replicas on
synthetic:tiny weights, HTTP on a loopback port; and the single server as a uvicorn process beside it, for the
bit-for-bit comparison. Run with ``make test-fleet`` (the .venv-fleet interpreter)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gr00t_fleet.local import free_port, processes_under, start_local, stop_local

CODE = Path(__file__).resolve().parents[2]


@dataclass
class Reply:
    status: int
    headers: dict
    body: dict


def http(url: str, path: str, body: dict | None = None, timeout_s: float = 60) -> Reply:
    """GET (``body`` None) or POST JSON; any status comes back as a ``Reply``."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            raw, status, headers = r.read(), r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        raw, status, headers = e.read(), e.code, dict(e.headers)
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = {"text": raw.decode(errors="replace")}
    return Reply(status, {k.lower(): v for k, v in headers.items()}, parsed)


def replica_env(cache: Path) -> dict[str, str]:
    # fp32 pinned (bit-for-bit comparisons); a queue of 2 per replica so that the 429 test can fill one
    return {"GR00T_VERSION": "n15", "GR00T_WEIGHTS": "synthetic:tiny", "GR00T_WARMUP_RUNS": "1",
            "GR00T_CACHE": str(cache), "GR00T_TORCH_DTYPE": "float32", "GR00T_MAX_QUEUE": "2",
            "GR00T_DRAIN_TIMEOUT_S": "30"}


@dataclass
class Fleet:
    url: str
    temp_dir: str
    args: dict
    up: bool = True
    log: list = field(default_factory=list)

    def wait_ready(self, n: int = 2, timeout_s: float = 120, exclude: tuple[str, ...] = ()) -> list[dict]:
        """Until ``n`` replicas (none of ``exclude``) are ready; returns /info's replicas."""
        deadline, last = time.time() + timeout_s, None
        while time.time() < deadline:
            last = http(self.url, "/info", timeout_s=10)
            if last.status == 200:
                ready = [r for r in last.body["fleet"]["replicas"] if r["state"] == "ready" and r["id"] not in exclude]
                if len(ready) == n and len(last.body["fleet"]["replicas"]) == n:
                    return ready
            time.sleep(0.5)
        raise AssertionError(f"{n} replicas not ready in {timeout_s} s: {last}")

    def shutdown(self) -> list[int]:
        """Serve and Ray shut down; the cluster's processes still running after 30 s (none, normally)."""
        if not self.up:
            return processes_under(self.temp_dir)
        self.up = False
        return stop_local(self.temp_dir)


@pytest.fixture(scope="session")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fleet-cache")


@pytest.fixture(scope="module")
def fleet(cache):
    from ray import serve

    from gr00t_fleet.app import build

    temp_dir = tempfile.mkdtemp(prefix="gr00t-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    url = start_local(temp_dir, free_port())
    args = {"replicas": 2, "drills": True, "env": replica_env(cache), "health_check_period_s": 1.0}
    t = time.time()
    serve.run(build(args), blocking=False)
    f = Fleet(url, temp_dir, args)
    f.wait_ready(2)
    print(f"fleet up in {time.time() - t:.1f} s")
    yield f
    f.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def single_server(cache, tmp_path_factory):
    """The single server (uvicorn, as the manifests launch it) on the same weights, one torch thread as a
    1-CPU Ray replica has."""
    log = tmp_path_factory.mktemp("single") / "server.log"
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("GR00T_", "TT_"))}, **replica_env(cache),
           "PYTHONPATH": str(CODE), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
                             "--lifespan", "on", "--http", "gr00t_p150.server.web.h11:GuardedH11Protocol",
                             "gr00t_p150.server.app:app"], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url, deadline = f"http://127.0.0.1:{port}", time.time() + 120
    while True:
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"single server did not start:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            break
        except OSError:
            time.sleep(0.3)
    yield url
    proc.terminate()
    proc.wait(30)
