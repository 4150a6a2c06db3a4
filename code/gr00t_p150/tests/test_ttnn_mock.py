# SPDX-License-Identifier: Apache-2.0
"""The TT-NN backend behind the real server, in its test mode on a mock P150 (``GR00T_BACKEND=ttnn
GR00T_TT_MOCK=1``): the server boots, converts the weights into the TT cache, compiles the whole
model on the mock device, and a /predict request travels the full path — validation, host chain,
static-shape check, device buffers, the four stages, readback, un-normalisation — with the response
flagged as mock. Without a device and without the test mode the backend refuses to boot."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from .test_process import CODE, post, served

pytestmark = pytest.mark.mock


def mock_serving(server_env: dict, tmp_path_factory, version: str):
    """A server of ``version`` in the TT-NN test mode, with its own caches."""
    env = {**server_env, "GR00T_VERSION": version, "GR00T_BACKEND": "ttnn", "GR00T_TT_MOCK": "1",
           "GR00T_CACHE": str(tmp_path_factory.mktemp(f"ttnn-cache-{version}"))}
    yield from served(env, tmp_path_factory.mktemp(f"uvicorn-ttnn-{version}") / "server.log", timeout_s=300)


@pytest.fixture(scope="module")
def mock_server(server_env, tmp_path_factory):
    if shutil.which("riscv64-unknown-elf-ld") is None:
        pytest.fail("the mock P150 needs binutils-riscv64-unknown-elf (.ci/run installs it)")
    yield from mock_serving(server_env, tmp_path_factory, "n15")


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return json.loads(resp.read())


def test_boot_converts_compiles_and_says_it_is_a_mock(mock_server):
    url, log = mock_server
    text = log.read_text()
    for phrase in ("Loading weights", "TT weight cache written", "Opening device: ttnn MOCK P150", "Warming up",
                   "Fidelity gate skipped", "Application startup complete"):
        assert phrase in text, phrase
    info = get(url + "/info")
    backend = info["backend"]
    assert backend["name"] == "ttnn" and backend["mock"] is True and backend["device"] == "mock-p150"
    assert backend["policy"] == {"dtype_policy": "mixed_dit", "trace_layout": "per_stage", "vit_fork": True}
    assert backend["traced"] is False and backend["programs"] > 50 and backend["seq_len_padded"] == 384
    assert info["stage"] == "stage1-ttnn-mock-untraced"  # a real p150a serves stage1-ttnn-traces
    assert "MOCK DEVICE" in backend["warning"] and info["fidelity"] == {"skipped": info["fidelity"]["skipped"]}


def test_a_request_travels_the_whole_tt_path_and_is_flagged(mock_server):
    url, _ = mock_server
    demo = get(url + "/demo")
    out = post(url + "/predict", {**demo["request"], "return_normalized": True})
    assert out["backend"] == {"name": "ttnn", "device": "mock-p150", "dtype": "mixed_dit", "mock": True}
    assert out["warning"].startswith("MOCK DEVICE") and "SYNTHETIC" in out["warning"]
    assert out["seq_len"] == 296 and set(out["actions"]) == {"left_arm", "right_arm", "left_hand", "right_hand"}
    # the mock computes nothing: the normalised chunk is exactly zero, and the server does not hide it
    assert all(v == 0.0 for row in out["action_pred_normalized"] for v in row)
    assert out["timing_ms"]["device"] > 0


def test_an_rtc_session_runs_inpaint_on_the_tt_path_and_refuses_guided(mock_server):
    """RTC's inpainting runs inside the TT denoise stage: /info offers it (guided is torch-only, with its reason), a
    session's second request comes back with the plan the torch backends make (``frozen`` = the delay); the rows
    themselves are proven in ``tests/mock/test_tt_rtc.py`` (the mock computes zeros)."""
    url, _ = mock_server
    rtc = get(url + "/info")["rtc"]
    assert rtc["available"] is True and rtc["variants"] == ["inpaint"] and "guided" in rtc["not_here"], rtc
    demo = get(url + "/demo")["request"]
    base = {k: v for k, v in demo.items() if k != "noise"}
    session = {**base, "session_id": "tt-rtc", "control_hz": 30, "return_normalized": True}
    first = post(url + "/predict", {**session, "seq": 0, "seed": 1})
    second = post(url + "/predict", {**session, "seq": 1, "seed": 2, "rtc": {"variant": "inpaint", "delay": 3}})
    assert first.get("rtc") is None or first["rtc"]["frozen"] == 0
    assert second["rtc"]["variant"] == "inpaint" and second["rtc"]["frozen"] == 3, second["rtc"]
    assert set(second) == set(first) | {"rtc"} and len(second["action_pred_normalized"]) == 16
    with pytest.raises(urllib.error.HTTPError) as refused:
        post(url + "/predict", {**session, "seq": 2, "seed": 3, "rtc": {"variant": "guided", "delay": 3}})
    body = json.loads(refused.value.read())
    assert refused.value.code in (400, 422) and "guided" in json.dumps(body) and "inpaint" in json.dumps(body), body


@pytest.fixture(scope="module")
def mock_batching_server(server_env, tmp_path_factory):
    """An N1.5 mock TT server batching up to 3 requests per call (buckets 1, 2, 4)."""
    yield from mock_serving({**server_env, "GR00T_MAX_BATCH": "3", "GR00T_BATCH_WINDOW_MS": "1000"},
                            tmp_path_factory, "n15")


def test_concurrent_requests_share_one_tt_call_in_a_static_bucket(mock_batching_server):
    """Micro-batching on TT-NN: boot builds a model per bucket (its own inputs; traces on a card) before any
    capture, /info names the buckets, and three concurrent requests with instructions of different lengths (the TT
    prompt is padded to a static length, so they batch) run as one call in bucket 4 (padded with a copy), each
    answered with its own seed, prompt and ``batch_size`` 3; the rows' numbers are proven in
    ``tests/mock/test_tt_batch.py`` (the mock computes zeros)."""
    from concurrent.futures import ThreadPoolExecutor

    url, log = mock_batching_server
    text = log.read_text()
    assert all(f"Compiled the untraced batch-{b} model" in text for b in (1, 2, 4)), text[-2000:]
    info = get(url + "/info")
    assert info["backend"]["batch_buckets"] == [1, 2, 4] and info["batching"]["static_buckets"] == [1, 2, 4]
    demo = {k: v for k, v in get(url + "/demo")["request"].items() if k != "noise"}
    endings = ["", " and then wave", " slowly, then put the lid back on the pot"]
    bodies = [{**demo, "seed": 30 + i, "instruction": demo["instruction"] + e} for i, e in enumerate(endings)]
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda b: post(url + "/predict", b), bodies))
    assert [a["batch_size"] for a in answers] == [3] * 3 and [a["seed"] for a in answers] == [30, 31, 32]
    assert answers[0]["seq_len"] < answers[1]["seq_len"] < answers[2]["seq_len"]
    assert all(a["backend"]["mock"] is True and len(a["actions"]["left_arm"]) == 16 for a in answers)
    assert get(url + "/info")["batching"]["calls_by_size"].get("3", 0) >= 1


def test_malformed_input_is_refused_before_the_device(mock_server):
    url, _ = mock_server
    demo = get(url + "/demo")
    body = {**demo["request"], "instruction": "x " * 400}
    with pytest.raises(urllib.error.HTTPError) as err:
        post(url + "/predict", body)
    assert err.value.code == 400 and json.loads(err.value.read())["error"]["field"] == "instruction"


def test_without_a_device_the_ttnn_backend_names_the_cause(server_env, tmp_path):
    from models.experimental.gr00t.tt.runner import device_present

    if device_present():
        pytest.skip("a Tenstorrent device is present: the no-device refusal cannot be observed here")
    env = {**server_env, "GR00T_BACKEND": "ttnn", "GR00T_CACHE": str(tmp_path)}
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("GR00T_", "TT_"))}
    proc = subprocess.run([sys.executable, "-c", "from gr00t_p150.server.engine import Engine\n"
                           "from gr00t_p150.server.exceptions import BootError\n"
                           "from gr00t_p150.server.settings import load_config\n"
                           "try:\n    Engine(load_config())._boot()\n"
                           "except BootError as e:\n    print('BootError:', e)"],
                          env={**inherited, **env, "PYTHONPATH": str(CODE)}, capture_output=True, text=True,
                          timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("BootError:")]
    assert len(lines) == 1 and "no Tenstorrent device" in lines[0], proc.stdout + proc.stderr


SHUTDOWN_PROBE = """
import json
from fastapi.testclient import TestClient
from gr00t_p150.server.app import create_app
from gr00t_p150.server.settings import load_config
from models.experimental.gr00t.tt import runner

calls = []
release, close = runner.TTRunner.release, runner.close_model_device
runner.TTRunner.release = lambda self: (calls.append("release traces"), release(self))[1]
runner.close_model_device = lambda device: (calls.append("close device"), close(device))[1]
with TestClient(create_app(load_config())) as client:
    assert client.get("/health").json()["status"] == "ok"
    engine = client.app.state.engine
    before = list(calls)
backend = engine.backend
backend.close()  # a second close is a no-op
print(json.dumps({"before": before, "after": calls, "device": backend.device, \
"traces": len(backend.policy.runner.traces)}))
"""


def test_shutdown_releases_the_traces_and_closes_the_device(server_env, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GR00T_", "TT_"))}
    env |= {**server_env, "GR00T_BACKEND": "ttnn", "GR00T_TT_MOCK": "1", "GR00T_CACHE": str(tmp_path),
            "PYTHONPATH": str(CODE)}
    proc = subprocess.run([sys.executable, "-c", SHUTDOWN_PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["before"] == []  # nothing released while serving
    assert out["after"] == ["release traces", "close device"]  # once, at shutdown, in that order
    assert out["device"] is None and out["traces"] == 0
    assert "Backend closed: ttnn" in proc.stderr


# ---- N1.7 DROID through the same backend ---------------------------------------------------------------
@pytest.fixture(scope="module")
def mock_server_n17(server_env, tmp_path_factory):
    yield from mock_serving(server_env, tmp_path_factory, "n17")


def test_n17_boots_on_the_mock_and_reports_its_queues(mock_server_n17):
    url, log = mock_server_n17
    text = log.read_text()
    for phrase in ("TT weight cache written", "Opening device: ttnn MOCK P150", "1 command queue(s)",
                   "GR00T_NUM_CQS=2 runs as 1 command queue on the mock P150", "Compiled the untraced batch-1 model",
                   "Fidelity gate skipped", "Application startup complete"):
        assert phrase in text, phrase
    info = get(url + "/info")
    backend = info["backend"]
    assert info["version"] == "n17" and info["stage"] == "stage1-ttnn-mock-untraced"
    assert backend["name"] == "ttnn" and backend["mock"] is True and backend["seq_len_padded"] == 512
    assert backend["num_cqs"] == 1 and backend["num_cqs_requested"] == 2  # the published N1.7 default is 2
    assert info["config"]["tt_num_cqs"] == 2


def test_an_n17_request_travels_the_whole_tt_path_and_is_flagged(mock_server_n17):
    url, _ = mock_server_n17
    demo = get(url + "/demo")
    out = post(url + "/predict", {**demo["request"], "return_normalized": True})
    assert out["backend"] == {"name": "ttnn", "device": "mock-p150", "dtype": "mixed_dit", "mock": True}
    assert out["warning"].startswith("MOCK DEVICE")
    assert {k: (len(v), len(v[0])) for k, v in out["actions"].items()} == {
        "eef_9d": (40, 9), "gripper_position": (40, 1), "joint_position": (40, 7)}
    assert all(v == 0.0 for row in out["action_pred_normalized"] for v in row)  # nothing computed, nothing hidden
    assert out["timing_ms"]["device"] > 0


def test_an_n17_instruction_over_the_limit_is_refused_before_the_device(mock_server_n17):
    url, _ = mock_server_n17
    demo = get(url + "/demo")
    with pytest.raises(urllib.error.HTTPError) as err:
        post(url + "/predict", {**demo["request"], "instruction": "word " * 60})
    assert err.value.code == 400 and json.loads(err.value.read())["error"]["field"] == "instruction"


# ---- N1.6 (GR1 tag) through the same backend ----------------------------------------------------------
@pytest.fixture(scope="module")
def mock_server_n16(server_env, tmp_path_factory):
    # GR00T_MAX_BATCH=4: the N1.6 TT model runs one request per call, so the boot builds bucket 1 only and says why
    env = {**server_env, "GR00T_MAX_BATCH": "4", "GR00T_BATCH_WINDOW_MS": "2"}
    yield from mock_serving(env, tmp_path_factory, "n16")


def test_n16_boots_on_the_mock_with_one_queue_and_one_bucket(mock_server_n16):
    url, log = mock_server_n16
    text = log.read_text()
    for phrase in ("TT weight cache written", "Opening device: ttnn MOCK P150", "1 command queue(s)",
                   "Compiled the untraced batch-1 model", "Fidelity gate skipped",
                   "GR00T_MAX_BATCH=4 ignored: the GR00T_VERSION=n16 TT-NN model runs one request per call",
                   "Application startup complete"):
        assert phrase in text, phrase
    assert "batch-2" not in text
    info = get(url + "/info")
    backend = info["backend"]
    assert info["version"] == "n16" and info["stage"] == "stage1-ttnn-mock-untraced"
    # the prompt without its instruction (14 + 2 + 5 + 81 + 2) + the 102-token limit = 206 → 224
    assert backend["name"] == "ttnn" and backend["mock"] is True and backend["seq_len_padded"] == 224
    assert backend["num_cqs"] == 1 and backend["num_cqs_requested"] == 1 and info["config"]["tt_num_cqs"] == 1
    assert backend["batch_buckets"] == [1]


def test_an_n16_request_travels_the_whole_tt_path_and_is_flagged(mock_server_n16):
    url, _ = mock_server_n16
    demo = get(url + "/demo")
    out = post(url + "/predict", {**demo["request"], "return_normalized": True})
    assert out["backend"] == {"name": "ttnn", "device": "mock-p150", "dtype": "mixed_dit", "mock": True}
    assert out["warning"].startswith("MOCK DEVICE")
    # the GR1 tag's 16-step horizon (not the 50-row envelope), its five groups
    assert {k: (len(v), len(v[0])) for k, v in out["actions"].items()} == {
        "left_arm": (16, 7), "right_arm": (16, 7), "left_hand": (16, 6), "right_hand": (16, 6), "waist": (16, 3)}
    assert len(out["action_pred_normalized"]) == 16 and len(out["action_pred_normalized"][0]) == 128
    assert all(v == 0.0 for row in out["action_pred_normalized"] for v in row)  # nothing computed, nothing hidden
    assert out["timing_ms"]["device"] > 0


def test_an_n16_instruction_over_the_limit_is_refused_before_the_device(mock_server_n16):
    url, _ = mock_server_n16
    demo = get(url + "/demo")
    with pytest.raises(urllib.error.HTTPError) as err:
        post(url + "/predict", {**demo["request"], "instruction": "word " * 120})
    assert err.value.code == 400 and json.loads(err.value.read())["error"]["field"] == "instruction"


MOCK_SERVERS = {"n15": "mock_server", "n16": "mock_server_n16", "n17": "mock_server_n17"}


@pytest.mark.parametrize("which", list(MOCK_SERVERS))
def test_the_smoke_test_passes_against_the_mock_servers(which, request):
    url, _ = request.getfixturevalue(MOCK_SERVERS[which])
    proc = subprocess.run([sys.executable, str(CODE / "gr00t_p150/server/smoke_test.py"), "--url", url, "-v"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PASS smoke_test") and "MOCK device" in proc.stdout
    assert "stage stage1-ttnn-mock-untraced" in proc.stdout
