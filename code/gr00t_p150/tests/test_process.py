# SPDX-License-Identifier: Apache-2.0
"""A real uvicorn process: the smoke test passes against it, and 8 concurrent clients each get exactly
the answer a sequential request with the same seed gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .conftest import CODE, free_port

# How the manifests launch it (tt-model: `python -m uvicorn --host … --port … --lifespan on [serve.args] APP`).
SERVE_ARGS = ("--lifespan", "on", "--http", "gr00t_p150.server.web.h11:GuardedH11Protocol")


def start(env: dict, port: int, log: Path) -> subprocess.Popen:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("GR00T_", "TT_"))}  # only what we set
    full_env = {**inherited, **env, "PYTHONPATH": str(CODE)}
    return subprocess.Popen([sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
                             *SERVE_ARGS, "gr00t_p150.server.app:app"],
                            env=full_env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


def serve(env: dict, log: Path, timeout_s: float = 180):
    """Start a server process and wait until /health answers: (process, url). Fails with the log's tail."""
    port = free_port()
    proc = start(env, port, log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited early:\n{log.read_text()[-4000:]}")
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    pytest.fail(f"server not ready:\n{log.read_text()[-4000:]}")


def smoke_test(url: str, *args: str) -> subprocess.CompletedProcess:
    """``smoke_test.py --url url`` against a live server, as an operator runs it."""
    return subprocess.run([sys.executable, str(CODE / "gr00t_p150/server/smoke_test.py"), "--url", url, *args],
                          capture_output=True, text=True, timeout=300)


def smoke_test_on_a_live_server(env: dict, log: Path) -> str:
    """Start a server process with ``env``, run the smoke test against it, stop it; the test's stdout (asserted
    PASS)."""
    proc, url = serve(env, log, timeout_s=180)
    try:
        out = smoke_test(url)
        assert out.returncode == 0 and out.stdout.startswith("PASS"), out.stdout + out.stderr
        return out.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def served(env: dict, log: Path, timeout_s: float = 180):
    """A fixture body: serve, yield (url, log), then terminate the server and wait for it."""
    proc, url = serve(env, log, timeout_s)
    yield url, log
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def live_server(server_env, tmp_path_factory):
    yield from served(server_env, tmp_path_factory.mktemp("uvicorn") / "server.log")


def test_boot_log_uses_the_phrases_tt_serve_watches(live_server):
    _, log = live_server
    text = log.read_text()
    for phrase in ("Loading weights", "Opening device", "Warming up", "Fidelity gate", "Model warmup completed",
                   "Application startup complete"):
        assert phrase in text, phrase
    assert text.index("Fidelity gate") < text.index("Application startup complete")


def test_smoke_test_passes(live_server):
    url, _ = live_server
    proc = smoke_test(url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PASS smoke_test") and proc.stdout.count("\n") == 1
    assert "(stage reference-fp32-cpu; PCC 1.000000" in proc.stdout, proc.stdout  # what is served, as /info says


def test_eight_concurrent_clients_get_their_own_sequential_answers(live_server, request_body):
    url, _ = live_server
    del request_body["noise"]
    bodies = [{**request_body, "seed": s} for s in range(8)]
    sequential = [post(url + "/predict", b)["actions"] for b in bodies]
    assert len({json.dumps(a) for a in sequential}) == 8  # eight different answers to tell apart
    with ThreadPoolExecutor(8) as pool:
        concurrent = list(pool.map(lambda b: post(url + "/predict", b)["actions"], bodies))
    assert concurrent == sequential


def test_a_bad_setting_stops_the_boot_with_the_variable_named(server_env, tmp_path):
    env = {k: v for k, v in server_env.items() if k != "GR00T_VERSION"}
    log = tmp_path / "server.log"
    proc = start(env, free_port(), log)
    assert proc.wait(timeout=120) != 0
    assert "Boot failed: GR00T_VERSION" in log.read_text()
    assert "Application startup complete" not in log.read_text()


def test_gr00t_client_http_matches_a_plain_json_post(live_server, request_body):
    """``gr00t_client.HttpClient`` (frames PNG-encoded by Pillow from the decoded demo frames) gets the answer a
    plain JSON post of the demo request gets: PNG is lossless, so the same pixels and the same actions."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    from gr00t_client import HttpClient, PolicyError

    url, _ = live_server
    want = post(url + "/predict", request_body)["actions"]
    images = {cam: np.asarray(Image.open(io.BytesIO(base64.b64decode(v))).convert("RGB"))
              for cam, v in request_body["images"].items()}
    actions, info = HttpClient(url).get_action({"images": images, "state": request_body["state"],
                                                "instruction": request_body["instruction"],
                                                "noise": np.asarray(request_body["noise"])})
    assert {k: v.tolist() for k, v in actions.items()} == {k: np.float32(v).tolist() for k, v in want.items()}
    assert info["version"] == "n15"
    with pytest.raises(PolicyError, match="HTTP 400"):
        HttpClient(url).get_action({"images": images, "state": request_body["state"], "instruction": ""})
