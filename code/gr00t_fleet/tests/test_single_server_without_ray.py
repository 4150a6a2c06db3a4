# SPDX-License-Identifier: Apache-2.0
"""The single server never imports Ray: booted and serving in an interpreter where Ray is installed (.venv-fleet),
with every protocol on (HTTP, ZMQ, openpi websocket), not one ``ray`` module is loaded. Its own suite (``make
test``) runs in .venv, where Ray is not even installed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import CODE, free_port, replica_env

pytestmark = pytest.mark.fleet

PROGRAM = r"""
import importlib.util, json, os, sys
assert importlib.util.find_spec("ray") is not None, "this check needs an interpreter with Ray installed"
from fastapi.testclient import TestClient
from gr00t_p150.server.app import app
with TestClient(app) as c:
    demo = c.get("/demo").json()["request"]
    reply = c.post("/predict", json=demo)
    assert reply.status_code == 200, reply.text
    assert c.get("/info").json()["protocols"]["zmq"] and c.get("/info").json()["protocols"]["openpi"]
print(json.dumps(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))))
"""


def test_the_single_server_boots_and_serves_without_importing_ray(cache):
    env = {**replica_env(cache), "GR00T_ZMQ_PORT": str(free_port()), "GR00T_OPENPI_PORT": str(free_port()),
           "PYTHONPATH": str(CODE), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
