# SPDX-License-Identifier: Apache-2.0
"""Production serving: admission (429), deadlines (504), auth (401), Prometheus metrics, stalled
connections (408 / closed), a lost backend (/health 503), SIGTERM drain and a second SIGTERM, and a
property-based fuzz of /predict that must never produce a 5xx.

The process tests launch uvicorn the way the manifests do (``--http gr00t_p150.server.web.h11:GuardedH11Protocol``)
and talk to 127.0.0.1 over raw sockets where a client must misbehave."""

from __future__ import annotations

import copy
import http.client
import json
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import metrics_of, with_config
from .test_process import serve

KEY = "test-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}


# ---- helpers ---------------------------------------------------------------------------------------
def call(url: str, path: str, body: dict | None = None, headers: dict | None = None, timeout: float = 60):
    """(status, lower-cased headers, parsed body) for GET (no body) or POST (JSON body); 4xx/5xx do not raise."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json",
                                                                 **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, hdrs, raw = resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as err:
        status, hdrs, raw = err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()
    try:
        return status, hdrs, json.loads(raw)
    except ValueError:
        return status, hdrs, raw.decode()


def connect(url: str) -> socket.socket:
    u = urlparse(url)
    return socket.create_connection((u.hostname, u.port), timeout=30)


def head(path: str, length: int, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n").encode()


def read_until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    t0, data = time.monotonic(), b""
    sock.settimeout(limit_s)
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for more than {limit_s} s; got {data[:200]!r}")
    return data, time.monotonic() - t0


def response_of(sock: socket.socket) -> tuple[int, dict]:
    """Read one HTTP response from a raw socket (http.client's parser): (status, JSON body)."""
    sock.settimeout(30)
    resp = http.client.HTTPResponse(sock)
    resp.begin()
    return resp.status, json.loads(resp.read())


# ---- a guarded server: one place in the queue, a key, 1 s head and body timeouts ---------------------
@pytest.fixture(scope="module")
def guarded(server_env, tmp_path_factory):
    log = tmp_path_factory.mktemp("guarded") / "server.log"
    env = {**server_env, "GR00T_MAX_QUEUE": "1", "GR00T_API_KEY": KEY, "GR00T_HEADER_TIMEOUT_S": "1",
           "GR00T_BODY_TIMEOUT_S": "1"}
    proc, url = serve(env, log)
    yield url, log
    proc.terminate()
    proc.wait(timeout=30)


def test_auth_guards_every_route_but_health_and_the_key_is_never_shown(guarded, request_body):
    url, log = guarded
    assert call(url, "/health")[0] == 200
    wrong = {"Authorization": "Bearer " + "x" * len(KEY)}
    for path, body in (("/predict", request_body), ("/info", None), ("/demo", None), ("/metrics", None),
                       ("/openapi.json", None), ("/docs", None), ("/v1/models", None)):
        for headers in (None, wrong, {"Authorization": KEY}):
            status, hdrs, answer = call(url, path, body, headers)
            assert status == 401, (path, headers, status)
            assert hdrs.get("www-authenticate") == "Bearer" and answer["error"]["field"] == "Authorization"
    status, _, info = call(url, "/info", headers=AUTH)
    assert status == 200 and info["config"]["auth"] == "bearer"
    assert call(url, "/predict", request_body, AUTH)[0] == 200
    assert KEY not in json.dumps(info) and KEY not in log.read_text()


def test_a_stalled_upload_gets_408_and_takes_no_place_in_the_queue(guarded, request_body):
    url, _ = guarded
    stalled = connect(url)
    stalled.sendall(head("/predict", 1000, f"Authorization: Bearer {KEY}\r\n") + b'{"images": ')
    time.sleep(0.2)
    status, _, answer = call(url, "/predict", request_body, AUTH)  # GR00T_MAX_QUEUE is 1 on this server
    assert status == 200, answer
    data, took = read_until_closed(stalled, 10)
    assert data.startswith(b"HTTP/1.1 408 ") and b"GR00T_BODY_TIMEOUT_S" in data, data[:200]
    assert took < 5
    m = metrics_of(call(url, "/metrics", headers=AUTH)[2])
    assert m[("gr00t_requests_total", frozenset({("route", "/predict"), ("status", "408")}))] >= 1


def test_a_connection_that_stalls_in_its_head_is_closed(guarded):
    url, _ = guarded
    silent, partial = connect(url), connect(url)
    partial.sendall(b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    for sock in (silent, partial):
        data, took = read_until_closed(sock, 10)
        assert data == b"" and took < 5, (data, took)
    assert call(url, "/health")[0] == 200  # and the server still serves


def test_a_deadline_that_passes_while_the_body_is_read_gets_504(guarded, request_body):
    url, _ = guarded
    body = json.dumps({**request_body, "timeout_ms": 100}).encode()
    sock = connect(url)
    sock.sendall(head("/predict", len(body), f"Authorization: Bearer {KEY}\r\n") + body[:20])
    time.sleep(0.4)  # slower than the deadline, faster than GR00T_BODY_TIMEOUT_S
    sock.sendall(body[20:])
    status, answer = response_of(sock)
    assert status == 504 and answer["error"]["field"] == "timeout_ms", (status, answer)


def test_metrics_cover_requests_stages_queue_boot_and_model(guarded, request_body):
    url, _ = guarded
    assert call(url, "/predict", request_body, AUTH)[0] == 200
    status, hdrs, text = call(url, "/metrics", headers=AUTH)
    assert status == 200 and hdrs["content-type"].startswith("text/plain")
    m = metrics_of(text)
    assert m[("gr00t_requests_total", frozenset({("route", "/predict"), ("status", "200")}))] >= 1
    served = m[("gr00t_request_stage_duration_seconds_count", frozenset({("stage", "total")}))]
    assert served >= 1
    for stage in ("decode", "encode", "device", "decode_actions"):
        assert m[("gr00t_request_stage_duration_seconds_count", frozenset({("stage", stage)}))] == served
        assert ("gr00t_request_stage_duration_seconds_bucket", frozenset({("stage", stage), ("le", "0.001")})) in m
        assert ("gr00t_request_stage_duration_seconds_bucket", frozenset({("stage", stage), ("le", "30.0")})) in m
    assert m[("gr00t_queue_limit", frozenset())] == 1 and m[("gr00t_ready", frozenset())] == 1
    assert m[("gr00t_fidelity_gate_passed", frozenset())] == 1 and m[("gr00t_fidelity_gate_pcc", frozenset())] > 0.999
    assert m[("gr00t_warmup_median_seconds", frozenset())] > 0
    info = [dict(labels) for (name, labels), v in m.items() if name == "gr00t_model_info" and v == 1]
    assert len(info) == 1 and info[0]["version"] == "n15" and info[0]["synthetic"] == "true"
    assert info[0]["stage"] == "reference-fp32-cpu" and info[0]["weights_source"] == "synthetic:tiny"
    assert call(url, "/no/such/route", headers=AUTH)[0] == 404
    again = metrics_of(call(url, "/metrics", headers=AUTH)[2])
    assert again[("gr00t_requests_total", frozenset({("route", "other"), ("status", "404")}))] >= 1


# ---- in-process: a full queue, deadlines against the device thread, a lost backend -------------------
@pytest.fixture
def slow_device(monkeypatch):
    """Make a server's device thread take 0.5 s longer per request."""
    def slow(engine):
        real_run = engine.backend.run

        def slow_run(prepared):
            time.sleep(0.5)
            return real_run(prepared)

        monkeypatch.setattr(engine.backend, "run", slow_run)
    return slow


def test_a_full_queue_gets_429_with_retry_after(server_config, request_body, slow_device):
    from gr00t_p150.server.app import create_app

    with TestClient(create_app(with_config(server_config, max_queue=1)), raise_server_exceptions=False) as c:
        slow_device(c.app.state.engine)
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(c.post, "/predict", json=request_body)
            time.sleep(0.15)
            assert c.get("/health").json()["queue_depth"] == 1
            t0 = time.monotonic()
            second = c.post("/predict", json=request_body)
            refused_in = time.monotonic() - t0
            assert first.result().status_code == 200
        assert second.status_code == 429 and refused_in < 0.2, (second.status_code, refused_in)
        assert int(second.headers["Retry-After"]) >= 1
        assert second.json()["error"]["retry_after_s"] == int(second.headers["Retry-After"])
        assert c.get("/health").json()["queue_depth"] == 0
        assert c.post("/predict", json=request_body).status_code == 200  # a place is free again
        m = metrics_of(c.get("/metrics").text)
        assert m[("gr00t_admission_refused_total", frozenset({("reason", "queue_full")}))] == 1
        assert m[("gr00t_requests_total", frozenset({("route", "/predict"), ("status", "429")}))] == 1
        assert m[("gr00t_requests_total", frozenset({("route", "/predict"), ("status", "200")}))] == 2


def test_a_deadline_refuses_only_work_the_device_has_not_started(client, request_body, slow_device):
    slow_device(client.app.state.engine)
    body = {**request_body, "timeout_ms": 200}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(client.post, "/predict", json=body)
        time.sleep(0.1)
        second = pool.submit(client.post, "/predict", json=body)
        first, second = first.result(), second.result()
    assert first.status_code == 200  # started within its deadline, finished after it: always answered
    assert second.status_code == 504, second.text  # waited for the device past its deadline
    assert "waited for the device" in second.json()["error"]["rule"]


@pytest.fixture
def host_threads_seen(client, monkeypatch):
    """The thread (name, torch threads) each /predict's host work starts on, in order."""
    from gr00t_p150.server import service as service_module

    import torch

    seen, real = [], service_module.decode_request
    monkeypatch.setattr(service_module, "decode_request", lambda engine, body: (
        seen.append((threading.current_thread().name, torch.get_num_threads())), real(engine, body))[1])
    return seen


def test_an_idle_device_thread_does_the_host_work_of_a_small_request(client, request_body, reference_answer,
                                                                     host_threads_seen):
    import torch

    engine = client.app.state.engine
    errors = engine.device_errors
    for _ in range(2):
        r = client.post("/predict", json=request_body)
        assert r.status_code == 200 and r.json()["actions"] == reference_answer["actions"]
    bad = client.post("/predict", json={**request_body, "state": {}})
    assert bad.status_code == 400, bad.text  # the request's own error, raised on the device thread
    assert engine.device_errors == errors and engine.consecutive_device_errors == 0
    device_threads = engine._executor.submit(lambda: (threading.current_thread().name,
                                                      torch.get_num_threads())).result()
    assert host_threads_seen == [device_threads] * 3  # one frame (n15): the device thread keeps its pool
    assert client.post("/predict", json=request_body).status_code == 200  # nothing was left counted as busy
    assert len(host_threads_seen) == 4 and host_threads_seen[-1] == device_threads


def test_a_busy_device_or_a_large_body_leaves_the_host_work_on_a_worker(client, request_body, reference_answer,
                                                                        host_threads_seen, slow_device, monkeypatch):
    from gr00t_p150.server import service as service_module

    slow_device(client.app.state.engine)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(client.post, "/predict", json=request_body)
        time.sleep(0.15)  # the first is on the device for 0.5 s
        second = pool.submit(client.post, "/predict", json=request_body)
        assert first.result().status_code == 200 and second.result().status_code == 200
    assert second.result().json()["actions"] == reference_answer["actions"]
    (first_thread, _), (second_thread, second_torch) = host_threads_seen
    assert first_thread.startswith("gr00t-device")
    assert not second_thread.startswith("gr00t-device") and second_torch == 1  # a request worker, single-threaded
    monkeypatch.setattr(service_module, "SMALL_REQUEST_BYTES", 100)
    assert client.post("/predict", json=request_body).status_code == 200
    assert not host_threads_seen[-1][0].startswith("gr00t-device")


def test_a_backend_failing_every_request_is_reported_lost(server_config, request_body, monkeypatch):
    from gr00t_p150.server.app import create_app
    from gr00t_p150.server.engine import LOST_AFTER

    with TestClient(create_app(server_config), raise_server_exceptions=False) as c:
        engine = c.app.state.engine

        def broken(prepared):
            raise RuntimeError("device stopped answering\nsecond line")

        monkeypatch.setattr(engine.backend, "run", broken)
        assert c.get("/health").status_code == 200
        for _ in range(LOST_AFTER):
            r = c.post("/predict", json=request_body)
            assert r.status_code == 500 and "RuntimeError" in r.json()["error"]["rule"]
        health = c.get("/health")
        assert health.status_code == 503, health.text
        h = health.json()
        assert h["status"] == "lost" and h["device_errors"] == LOST_AFTER
        assert h["last_device_error"]["type"] == "RuntimeError"
        assert h["last_device_error"]["message"] == "device stopped answering"
        assert c.post("/predict", json=request_body).status_code == 503
        assert metrics_of(c.get("/metrics").text)[("gr00t_device_errors_total", frozenset())] == LOST_AFTER


def test_an_instruction_with_a_lone_surrogate_is_refused(client, request_body):
    raw = json.dumps({**request_body, "instruction": "pick the pear"}).encode()
    for invalid in (b"\xed\xbf\xbf", b"\\udfff"):  # raw bytes (Python's JSON decoder passes them) and an escape
        r = client.post("/predict", content=raw.replace(b"the pear", b"the " + invalid),
                        headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["field"] == "instruction", r.text


def test_openapi_documents_400_not_422_and_every_refusal(client):
    schema = client.get("/openapi.json").json()
    codes = {code for path in schema["paths"].values() for op in path.values() for code in op["responses"]}
    assert "422" not in codes and "HTTPValidationError" not in schema["components"]["schemas"]
    assert {"400", "401", "408", "413", "429", "503", "504"} <= set(schema["paths"]["/predict"]["post"]["responses"])
    assert "timeout_ms" in schema["components"]["schemas"]["PredictRequest"]["properties"]


# ---- SIGTERM ---------------------------------------------------------------------------------------
def test_sigterm_drains_the_request_in_flight_and_exits_0(server_env, request_body, tmp_path):
    log = tmp_path / "server.log"
    proc, url = serve(server_env, log)
    body = json.dumps(request_body).encode()
    sock = connect(url)
    sock.sendall(head("/predict", len(body)) + body[:100])  # in flight: its head arrived, its body half sent
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert proc.poll() is None, "exited before the request in flight was answered"
    sock.sendall(body[100:])
    reply, _ = read_until_closed(sock, 30)
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:300]
    assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "SIGTERM: draining" in text and "Backend closed" in text


def test_a_second_sigterm_exits_at_once(server_env, tmp_path):
    log = tmp_path / "server.log"
    proc, url = serve(server_env, log)
    sock = connect(url)
    sock.sendall(head("/predict", 1000) + b"{")  # a client that never finishes (GR00T_BODY_TIMEOUT_S is 30 s)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert proc.poll() is None, "the first SIGTERM must wait for the drain"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 128 + signal.SIGTERM
    assert time.monotonic() - t0 < 2
    sock.close()


# ---- property-based fuzz: nothing a client sends makes a 5xx ----------------------------------------
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                  max_size=3),
                    max_leaves=8)
TOP_KEYS = ("images", "state", "instruction", "embodiment", "seed", "noise", "state_dtype", "return_normalized",
            "timeout_ms")


@st.composite
def hostile_bodies(draw, demo_request: dict) -> bytes:
    kind = draw(st.sampled_from(("mutated", "mutated", "mutated", "json", "bytes")))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "json":
        return json.dumps(draw(JSON)).encode()
    body = copy.deepcopy(demo_request)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(TOP_KEYS) | st.text(max_size=6))
        target = body
        if key in ("images", "state") and isinstance(body.get(key), dict) and body[key] and draw(st.booleans()):
            target, key = body[key], draw(st.sampled_from(sorted(body[key])) | st.text(max_size=6))
        if draw(st.booleans()) and key in target:
            del target[key]
        else:
            target[key] = draw(JSON)
    return json.dumps(body).encode()  # lone surrogates go out as \udxxx escapes, NaN as the NaN token


@pytest.fixture(scope="module")
def demo_request(demo):
    request = copy.deepcopy(demo["request"])
    request.pop("noise")
    request["seed"] = 7  # a request that a mutation leaves valid costs one tiny-model run
    return request


def test_no_input_makes_a_5xx(client, demo_request):
    seen: dict[int, int] = {}
    lock = threading.Lock()

    @settings(max_examples=250, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(hostile_bodies(demo_request))
    def check(raw: bytes):
        r = client.post("/predict", content=raw, headers={"Content-Type": "application/json"})
        with lock:
            seen[r.status_code] = seen.get(r.status_code, 0) + 1
        assert r.status_code in (200, 400, 413), (r.status_code, r.text[:300], raw[:300])
        if r.status_code != 200:
            error = r.json()["error"]
            assert isinstance(error["message"], str) and "Traceback" not in error["message"]

    check()
    assert seen.get(400, 0) > 100, seen  # the fuzz reached the validation, not just one refusal


def test_the_key_setting_is_checked_and_never_shown():
    from gr00t_p150.server.settings import SettingError, load_config

    with pytest.raises(SettingError) as short:
        load_config({"GR00T_VERSION": "n15", "GR00T_API_KEY": "hunter2"})
    assert "hunter2" not in str(short.value)
    with pytest.raises(SettingError, match="/health"):
        load_config({"GR00T_VERSION": "n15", "GR00T_AUTH_ROUTES": "/predict,/health"})
    c = load_config({"GR00T_VERSION": "n15", "GR00T_API_KEY": KEY, "GR00T_AUTH_ROUTES": "/predict, /metrics"})
    assert c.api_key == KEY and c.auth_routes == ("/predict", "/metrics")
    assert KEY not in repr(c) and KEY not in json.dumps(c.to_dict()) and c.to_dict()["auth"] == "bearer"
    assert load_config({"GR00T_VERSION": "n15"}).to_dict()["auth"] == "open"
