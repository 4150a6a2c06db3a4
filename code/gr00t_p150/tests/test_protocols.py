# SPDX-License-Identifier: Apache-2.0
"""The binary protocols on a real server (tiny synthetic checkpoints, both versions, loopback only):

- NVIDIA's GR00T PolicyServer protocol over ZMQ, driven by a client written here from the published
  ``PolicyClient`` code (REQ socket; msgpack; ndarrays as ``np.save`` bytes under ``__ndarray_class__``);
- the openpi websocket protocol, driven by the real ``openpi-client`` package from PyPI.

The same observation with the same noise gives bit-identical actions over HTTP/JSON, ZMQ and websocket; malformed
input gets a structured error in each protocol's own shape and the server keeps serving; nothing unpickles."""

from __future__ import annotations

import io
import pickle

import msgpack
import numpy as np
import pytest

from models.experimental.gr00t.common.versions import VERSIONS

from .wire_clients import (NvidiaWireClient, client_observation, groot_observation, openpi_observation,
                           serve_every_protocol)


@pytest.fixture(scope="module", params=VERSIONS)
def served(request, server_env):
    with serve_every_protocol(server_env, request.param) as s:
        yield s


def http_actions(http, demo) -> dict[str, np.ndarray]:
    r = http.post("/predict", json=demo)
    assert r.status_code == 200, r.text
    return {k: np.asarray(v, dtype=np.float32) for k, v in r.json()["actions"].items()}


def test_the_same_observation_gives_bit_identical_actions_over_http_zmq_and_websocket(served):
    from openpi_client.websocket_client_policy import WebsocketClientPolicy


    http, zmq_client, config, demo = served
    layout = http.app.state.engine.layout
    want = http_actions(http, demo)
    noise = np.asarray(demo["noise"], dtype=np.float32)

    action, info = zmq_client.get_action(groot_observation(demo, layout, layout.wire.language_key),
                                         {"noise": noise})
    assert set(action) == set(layout.action_keys) and info["noise_source"] == ["client"]
    for k in layout.action_keys:
        assert action[k].dtype == np.float32 and action[k].shape == (1, *want[k].shape)
        assert np.array_equal(action[k][0], want[k]), k

    policy = WebsocketClientPolicy(host="127.0.0.1", port=config.openpi_port)
    meta = policy.get_server_metadata()
    assert meta["action_keys"] == layout.action_keys and meta["action_horizon"] == want[layout.action_keys[0]].shape[0]
    assert meta["needs_session_id"] is False
    got = policy.infer({**openpi_observation(demo, layout), "noise": noise})
    assert got["actions"].shape == (meta["action_horizon"], sum(layout.action_dims.values()))
    for k in layout.action_keys:
        assert np.array_equal(got[f"action/{k}"], want[k]), k
    assert np.array_equal(got["actions"], np.concatenate([want[k] for k in layout.action_keys], axis=-1))
    assert got["server_timing"]["infer_ms"] > 0


def test_a_batch_is_served_item_by_item(served):

    http, zmq_client, _, demo = served
    layout = http.app.state.engine.layout
    key = layout.wire.language_key
    one, _ = zmq_client.get_action(groot_observation(demo, layout, key))  # the layout's default seed
    two, info = zmq_client.get_action(groot_observation(demo, layout, key, batch=2))
    assert info["noise_source"] == ["seed", "seed"]
    for k in layout.action_keys:
        assert two[k].shape[0] == 2 and np.array_equal(two[k][0], one[k][0]) and np.array_equal(two[k][1], one[k][0])


def test_zmq_endpoints_and_structured_errors(served):

    http, zmq_client, _, demo = served
    layout = http.app.state.engine.layout
    assert zmq_client.call("ping") == {"status": "ok", "message": "Server is running"}
    assert zmq_client.call("reset", {"options": None}) == {}
    config = zmq_client.call("get_modality_config")
    assert config["video"]["modality_keys"] == list(layout.cameras)
    assert config["action"]["modality_keys"] == layout.action_keys
    assert config["language"]["modality_keys"] == [layout.wire.language_key]

    obs = groot_observation(demo, layout, layout.wire.language_key)
    cam = layout.cameras[0]
    bad = {**obs, "video": {**obs["video"], cam: obs["video"][cam].astype(np.float32)}}
    err = zmq_client.call("get_action", {"observation": bad})["error"]
    assert err.startswith(f"observation.video.{cam}[0]:") and "uint8" in err
    group = layout.state_groups[0][0]
    short = {**obs, "state": {**obs["state"], group: obs["state"][group][..., :-1]}}
    assert zmq_client.call("get_action", {"observation": short})["error"].startswith(f"state.{group}: has ")
    assert "unknown endpoint" in zmq_client.call("train")["error"]
    assert "kill is disabled" in zmq_client.call("kill")["error"]
    assert "not a msgpack message" in zmq_client.send_raw(b"\xc1\xc1")["error"]

    # a pickled ndarray (object dtype) is refused unread: np.load(allow_pickle=False) never runs pickle
    blob = io.BytesIO()
    np.save(blob, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    pickled = {**obs, "state": {**obs["state"], group: {"__ndarray_class__": True, "as_npy": blob.getvalue()}}}
    reply = zmq_client.send_raw(msgpack.packb({"endpoint": "get_action", "data": {"observation": pickled}},
                                              default=NvidiaWireClient._encode))
    assert "without pickle" in reply["error"]
    raw_pickle = zmq_client.send_raw(pickle.dumps({"endpoint": "ping"}))
    assert "error" in raw_pickle
    action, _ = zmq_client.get_action(obs)  # and the server still serves
    assert set(action) == set(layout.action_keys)


def test_openpi_refusals_are_text_frames_and_the_connection_keeps_serving(served):
    from openpi_client.websocket_client_policy import WebsocketClientPolicy
    from websockets.sync.client import connect

    http, _, config, demo = served
    layout = http.app.state.engine.layout
    policy = WebsocketClientPolicy(host="127.0.0.1", port=config.openpi_port)
    obs = openpi_observation(demo, layout)
    with pytest.raises(RuntimeError, match="prompt: missing"):
        policy.infer({k: v for k, v in obs.items() if k != "prompt"})
    group = layout.state_groups[0][0]
    with pytest.raises(RuntimeError, match=f"state.{group}: has "):
        policy.infer({**obs, f"observation/{group}": obs[f"observation/{group}"][:-1]})
    with pytest.raises(RuntimeError, match="unknown key"):
        policy.infer({**obs, "observation/extra_camera": obs[f"observation/{layout.cameras[0]}"]})
    assert set(layout.action_keys) <= {k.split("/", 1)[1] for k in policy.infer(obs) if k.startswith("action/")}

    # an object-dtype array in openpi's encoding is refused without reading it
    with connect(f"ws://127.0.0.1:{config.openpi_port}", compression=None, max_size=None) as ws:
        ws.recv()  # metadata
        ws.send(msgpack.packb({**{k: v for k, v in obs.items() if not isinstance(v, np.ndarray)},
                               "observation/x": {b"__ndarray__": True, b"data": b"\x80\x04N.", b"dtype": "|O",
                                                 b"shape": [1]}}))
        assert "dtype object is not accepted" in ws.recv()


def test_gr00t_client_gets_the_same_actions_over_each_protocol(served):
    from gr00t_client import OpenpiClient, PolicyError, ZmqClient

    http, _, config, demo = served
    layout = http.app.state.engine.layout
    want = http_actions(http, demo)
    obs = {**client_observation(demo, layout), "noise": np.asarray(demo["noise"])}
    zmq_client, ws_client = ZmqClient(port=config.zmq_port), OpenpiClient(port=config.openpi_port)
    try:
        for name, client in (("zmq", zmq_client), ("openpi", ws_client)):
            actions, _ = client.get_action(obs)
            assert {k: np.array_equal(actions[k], want[k]) for k in want} == dict.fromkeys(want, True), name
        with pytest.raises(PolicyError, match="instruction"):
            zmq_client.get_action({**obs, "instruction": ""})
        assert zmq_client.ping() and zmq_client.reset() == {}
    finally:
        zmq_client.close()
        ws_client.close()
    # HttpClient needs a real socket (the TestClient has none): test_process.py runs it against a live server


def test_gr00t_client_imports_no_torch_and_installs_alone(tmp_path):
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    code = Path(__file__).resolve().parents[2]
    probe = ("import sys, gr00t_client; bad = [m for m in ('torch', 'models', 'gr00t_p150', 'transformers') "
             "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", probe], check=True, cwd=tmp_path, env={"PYTHONPATH": str(code)})
    import shutil

    source = shutil.copytree(code / "gr00t_client", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path), str(source)], check=True, timeout=120)  # builds in the copy
    wheel = next(tmp_path.glob("gr00t_client-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {"gr00t_client/__init__.py", "gr00t_client/clients.py", "gr00t_client/codecs.py"} <= set(names), names


def test_the_robot_loop_keeps_a_chunk_and_counts_every_tick(served):
    """``code/scripts/demo/robot_loop.py`` for 1.5 s at 30 Hz over ZMQ: every tick either ran an action or starved,
    chunks were asked for and timed, and an action's observation is never from the future."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "demo"))
    from robot_loop import run, stacked

    from gr00t_client import ZmqClient

    http, _, config, demo = served
    layout = http.app.state.engine.layout
    obs = client_observation(demo, layout)
    client = ZmqClient(port=config.zmq_port)
    try:
        first, _ = client.get_action(obs)
        r = run(client, obs, hz=30, seconds=1.5, ask_at=8, first=stacked(first))
    finally:
        client.close()
    assert r["ticks"] == 45 and r["executed"] + r["starved_ticks"] == 45
    assert r["requests"] >= 1 and r["latency_ms"]["p50"] > 0 and r["in_flight_max"] == 1
    assert r["staleness_ms"]["p50"] >= 0


def test_every_protocol_waits_in_the_one_admission_queue(served):
    """A full ``/predict`` queue (GR00T_MAX_QUEUE) refuses ZMQ and websocket requests too, in each one's error
    shape; the places they take are given back."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy


    http, zmq_client, config, demo = served
    layout = http.app.state.engine.layout
    admission = http.app.state.runtime.admission
    policy = WebsocketClientPolicy(host="127.0.0.1", port=config.openpi_port)
    full = admission.limit
    admission.depth += full
    try:
        reply = zmq_client.call("get_action", {"observation": groot_observation(
            demo, layout, layout.wire.language_key)})
        assert reply["error"].startswith("queue: the server is at GR00T_MAX_QUEUE"), reply
        with pytest.raises(RuntimeError, match="queue: the server is at GR00T_MAX_QUEUE"):
            policy.infer(openpi_observation(demo, layout))
    finally:
        admission.depth -= full
    import time

    before = admission.admitted
    policy.infer(openpi_observation(demo, layout))
    deadline = time.monotonic() + 5  # the place is given back on the event loop, just after the reply is sent
    while admission.depth and time.monotonic() < deadline:
        time.sleep(0.01)
    assert admission.admitted == before + 1 and admission.depth == 0


def test_sessions_over_zmq_and_websocket(served):
    """The same session rules on both protocols: an old seq is refused in each one's error shape, never run."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy


    http, zmq_client, config, demo = served
    layout = http.app.state.engine.layout
    obs = groot_observation(demo, layout, layout.wire.language_key)
    _, info = zmq_client.get_action(obs, {"session_id": "zmq-arm", "seq": 2})
    assert info["session"]["id"] == "zmq-arm" and info["session"]["seq"] == 2
    reply = zmq_client.call("get_action", {"observation": obs, "options": {"session_id": "zmq-arm", "seq": 2}})
    assert reply["error"].startswith("seq: seq 2 is not after"), reply
    assert zmq_client.call("reset", {"options": {"session_id": "zmq-arm"}}) == {"session_id": "zmq-arm", "reset": True}
    two = groot_observation(demo, layout, layout.wire.language_key, batch=2)
    assert "one at a time" in zmq_client.call("get_action", {"observation": two,
                                                             "options": {"session_id": "x"}})["error"]

    policy = WebsocketClientPolicy(host="127.0.0.1", port=config.openpi_port)
    got = policy.infer({**openpi_observation(demo, layout), "session_id": "ws-arm", "seq": 5})
    assert got["session"]["requests"] == 1
    with pytest.raises(RuntimeError, match="seq: seq 4 is not after"):
        policy.infer({**openpi_observation(demo, layout), "session_id": "ws-arm", "seq": 4})


def _n17_frozen_rows(engine, request, previous: dict) -> dict:
    """What N1.7 inpainting must put in its first rows: the previous absolute actions re-expressed against the
    request's state and clipped to the new steps' statistics (``encode_actions``; relative actions past the
    range of the new chunk's early steps cannot run there), decoded back."""
    from models.experimental.gr00t.common.normalization_n17 import decode_actions, encode_actions
    from models.experimental.gr00t.common.observation import parse_observation

    stats, layout = engine.backend.policy.stats, engine.layout
    state = engine.backend.prepare(parse_observation(request, layout), seed=0).inputs.raw_state
    rows = encode_actions(previous, state, stats, layout)
    chunk = np.zeros((engine.backend.action_shape[0], rows.shape[1]), np.float32)
    chunk[:len(rows)] = rows
    return {k: v[:len(rows)] for k, v in decode_actions(chunk, state, stats, layout).items()}


def _n16_frozen_rows(engine, request, previous: dict) -> dict:
    """N1.6's counterpart: relative keys re-expressed against the request's state with the new steps' statistics,
    absolute keys normalised and clipped (``normalization_n16.encode_actions``), decoded back."""
    from models.experimental.gr00t.common.normalization_n16 import decode_actions, encode_actions
    from models.experimental.gr00t.common.observation import parse_observation

    policy = engine.backend.policy
    state = engine.backend.prepare(parse_observation(request, engine.layout), seed=0).inputs.raw_state
    rows = encode_actions(previous, state, policy.stats, policy.processing)
    h = policy.config.action_head
    chunk = np.zeros((h.action_horizon, h.action_dim), np.float32)  # the 50 × 128 envelope decode_actions slices
    chunk[:len(rows), :rows.shape[1]] = rows
    return {k: v[:len(rows)] for k, v in decode_actions(chunk, state, policy.stats, policy.processing).items()}


# What inpainting must put in the frozen rows, per version: N1.5's absolute actions are the previous rows as they are
FROZEN_ROWS = {"n15": lambda engine, request, previous: previous, "n16": _n16_frozen_rows, "n17": _n17_frozen_rows}


def test_rtc_over_zmq_and_websocket(served):
    """Server-side RTC is not HTTP's alone: over ZMQ an inpaint request freezes the previous chunk's steps (the
    same rows in physical units for N1.5's absolute actions; for N1.6's and N1.7's relative ones the rows after the
    re-expression and its clipping to the new steps' statistics) and reports its plan in ``info["rtc"]``; over
    the openpi websocket a guided request reports its plan and a malformed ``rtc`` is refused with its field."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy


    http, zmq_client, config, demo = served
    layout = http.app.state.engine.layout
    horizon = http.app.state.engine.backend.action_shape[0]
    obs = groot_observation(demo, layout, layout.wire.language_key)
    session = {"session_id": "zmq-rtc", "control_hz": 30}
    first, _ = zmq_client.get_action(obs, {**session, "seq": 0, "seed": 1})
    second, info = zmq_client.get_action(obs, {**session, "seq": 1, "seed": 2, "rtc": {"variant": "inpaint",
                                                                                         "delay": 3}})
    plan = info["rtc"]
    off, frozen = plan["offset"], plan["frozen"]
    assert plan["variant"] == "inpaint" and frozen == min(3, horizon - off) > 0, plan
    want = {k: v[0, off:off + frozen] for k, v in first.items()}
    want = FROZEN_ROWS[config.version](http.app.state.engine, demo, want)  # as the server re-expressed them
    for k in first:
        np.testing.assert_allclose(second[k][0, :frozen], want[k], rtol=0, atol=1e-4)
    assert any(not np.allclose(second[k][0, frozen:], first[k][0, frozen:]) for k in first)  # the rest is new

    server_info = zmq_client.call("get_server_info")
    assert server_info["rtc"]["available"] and server_info["rtc"]["variants"] == ["inpaint", "guided"]
    assert server_info["sessions"]["sessions"] >= 1 and "enabled" in server_info["batching"]

    policy = WebsocketClientPolicy(host="127.0.0.1", port=config.openpi_port)
    meta = policy.get_server_metadata()
    assert meta["rtc"] == server_info["rtc"] == http.get("/info").json()["rtc"]
    assert meta["batching"] == server_info["batching"]
    base = {**openpi_observation(demo, layout), "session_id": "ws-rtc", "control_hz": 30}
    policy.infer({**base, "seq": 0})
    got = policy.infer({**base, "seq": 1, "rtc": {"variant": "guided", "delay": 2}})
    assert got["rtc"]["variant"] == "guided" and got["rtc"]["overlap"] == horizon - got["rtc"]["offset"] > 0
    with pytest.raises(RuntimeError, match="rtc.variant"):
        policy.infer({**base, "seq": 2, "rtc": {"variant": "bidirectional"}})


def test_hostile_messages_get_an_error_reply_and_never_raise(served):
    """Random bytes, random msgpack and mutated valid messages straight into both protocol handlers (no socket):
    every reply is the protocol's error shape or a valid answer, never an exception or a traceback."""
    from gr00t_client.codecs import groot_unpack, openpi_pack
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st


    http, _, _, demo = served
    zmq_endpoint, ws_endpoint = http.app.state.endpoints
    layout = http.app.state.engine.layout
    valid = msgpack.packb({"endpoint": "get_action", "data": {"observation": groot_observation(
        demo, layout, layout.wire.language_key)}}, default=NvidiaWireClient._encode)
    valid_ws = openpi_pack(openpi_observation(demo, layout))
    leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(), st.text(max_size=20),
                       st.binary(max_size=64))
    trees = st.recursive(leaves, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c,
                                                                                     max_size=4), max_leaves=20)

    @settings(max_examples=60, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(st.binary(max_size=256), trees.map(lambda t: msgpack.packb(t, use_bin_type=True)),
                     st.tuples(st.integers(0, len(valid) - 1), st.integers(0, 255)).map(
                         lambda p: valid[:p[0]] + bytes([p[1]]) + valid[p[0] + 1:])))
    def fuzz(message: bytes):
        reply, kill = zmq_endpoint.handle(message)
        decoded = groot_unpack(reply, 1 << 26)
        assert not kill
        if isinstance(decoded, dict) and "error" in decoded:  # a refusal names what is wrong; no internal error
            assert "internal error" not in decoded["error"] and "Traceback" not in decoded["error"], decoded
        else:
            assert isinstance(decoded, (list, dict)), decoded
        answer = ws_endpoint.answer(message if len(message) % 2 else valid_ws[: len(message)])
        assert isinstance(answer, bytes) or ("internal error" not in answer and ": " in answer), answer

    fuzz()
    action, _ = NvidiaWireClient(int(zmq_endpoint.address.rsplit(":", 1)[1])).get_action(
        groot_observation(demo, layout, layout.wire.language_key))
    assert set(action) == set(layout.action_keys)
