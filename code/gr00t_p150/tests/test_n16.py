# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6 through the same server, one embodiment per boot (``GR00T_EMBODIMENT``): each served tag boots through
the gate against its shipped golden, answers bit-identically over HTTP, NVIDIA's ZMQ protocol and openpi's websocket,
hands NVIDIA's ``PolicyClient`` the modality config the checkpoint stores for the tag, serves its horizon (not the
50-step noise envelope) on the fast path too, and passes the smoke test against a live process. GR1 (the default
tag) also runs every protocol test of ``test_protocols.py``. On TT-NN (``test_ttnn_mock.py``) N1.6 is served; the
generic refusal of a version without a TT-NN port is still shown here on a row with its port taken away."""

from __future__ import annotations

import json
import numpy as np
import pytest
from fastapi.testclient import TestClient

from .conftest import assert_matches_golden, reference_answer_of
from .test_process import smoke_test_on_a_live_server
from .wire_clients import groot_observation, openpi_observation, serve_every_protocol

# tag -> (layout, horizon, action groups in order)
TAGS = {
    "gr1": ("gr1_n16", 16, ["left_arm", "right_arm", "left_hand", "right_hand", "waist"]),
    "unitree_g1": ("unitree_g1", 30, ["left_arm", "right_arm", "left_hand", "right_hand", "waist",
                                      "base_height_command", "navigate_command"]),
    "oxe_widowx": ("oxe_widowx", 8, ["x", "y", "z", "roll", "pitch", "yaw", "gripper"]),
}


@pytest.fixture(scope="module", params=sorted(TAGS))
def tag_server(request, server_env):
    with serve_every_protocol({**server_env, "GR00T_EMBODIMENT": request.param}, "n16") as s:
        yield request.param, *s


def test_each_tag_is_served_identically_on_every_protocol_and_equals_its_golden(tag_server):
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    tag, http, zmq_client, config, demo = tag_server
    layout_name, horizon, keys = TAGS[tag]
    info = http.get("/info").json()
    assert (info["version"], info["contract"]["layout"], info["contract"]["embodiment"]) == ("n16", layout_name, tag)
    assert info["fidelity"]["passed"] and info["fidelity"]["golden"] == "shipped"
    r = http.post("/predict", json=demo)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["action_keys"] == keys and body["action_horizon"] == horizon and body["embodiment"] == tag
    assert all(len(v) == horizon for v in body["actions"].values())
    assert body["actions"] == reference_answer_of(http, demo)["actions"]  # the fp32 reference, in this process
    assert_matches_golden(body["actions"], http.get("/demo").json()["expected"]["actions"])  # made on another CPU

    layout = http.app.state.engine.layout
    noise = np.asarray(demo["noise"], dtype=np.float32)
    action, _ = zmq_client.get_action(groot_observation(demo, layout, layout.wire.language_key), {"noise": noise})
    policy = WebsocketClientPolicy(host="127.0.0.1", port=config.openpi_port)
    got = policy.infer({**openpi_observation(demo, layout), "noise": noise})
    for k in keys:
        want = np.asarray(body["actions"][k], dtype=np.float32)
        assert np.array_equal(action[k][0], want) and np.array_equal(got[f"action/{k}"], want), k
    assert policy.get_server_metadata()["action_horizon"] == horizon


def test_policy_client_gets_the_checkpoint_s_modality_config_for_the_tag(tag_server):
    """NVIDIA's N1.6 ``get_modality_config`` returns the processor's configs for the tag: here the very entry of the
    served checkpoint's ``processor_config.json`` (read with json, not through our loader)."""
    tag, http, zmq_client, _, _ = tag_server
    stored = json.loads((http.app.state.engine.booted.weights.path / "processor_config.json").read_text())
    want = stored["processor_kwargs"]["modality_configs"][tag]
    got = zmq_client.call("get_modality_config")
    assert got == want
    assert got["action"]["delta_indices"] == list(range(TAGS[tag][1]))  # the tag's horizon, not the 50 envelope


def test_an_rtc_prefix_is_at_most_the_tag_s_horizon(tag_server):
    tag, http, _, _, demo = tag_server
    horizon, width = http.app.state.engine.action_shape
    assert (horizon, width) == (TAGS[tag][1], 128)
    request = {k: v for k, v in demo.items() if k != "noise"}
    first = http.post("/predict", json={**request, "seed": 1, "return_normalized": True}).json()  # sent back below
    rows, actions = first["action_pred_normalized"], first["actions"]
    assert np.shape(rows) == (horizon, 128)
    longer = {"normalized": rows + rows[-1:], "actions": {k: v + v[-1:] for k, v in actions.items()}}
    r = http.post("/predict", json={**request, "rtc": {"variant": "inpaint", "delay": 2, "prefix": longer}})
    assert r.status_code == 400 and r.json()["error"]["field"].startswith("rtc.prefix"), r.text
    assert f"send 1 to {horizon}" in r.json()["error"]["message"]
    prefix = {"normalized": rows, "actions": actions}
    r = http.post("/predict", json={**request, "seed": 2, "return_normalized": True,
                                    "rtc": {"variant": "inpaint", "delay": 2, "prefix": prefix}})
    assert r.status_code == 200, r.text
    assert r.json()["rtc"]["frozen"] == 2 and np.shape(r.json()["action_pred_normalized"]) == (horizon, 128)


def test_the_fast_path_serves_n16_within_the_golden_rule(server_env):
    from gr00t_p150.server.app import create_app
    from gr00t_p150.server.settings import load_config

    env = {**server_env, "GR00T_VERSION": "n16", "GR00T_EMBODIMENT": "unitree_g1", "GR00T_TORCH_PATH": "fast"}
    with TestClient(create_app(load_config(env))) as c:
        info = c.get("/info").json()
        demo = c.get("/demo").json()
        body = c.post("/predict", json=demo["request"]).json()
    assert info["stage"] == "fast-fp32-cpu" and info["fidelity"]["passed"]
    assert {k: len(v) for k, v in body["actions"].items()} == {k: 30 for k in TAGS["unitree_g1"][2]}
    assert_matches_golden(body["actions"], demo["expected"]["actions"])


def test_settings_pick_the_tag_and_serve_n16_on_ttnn():
    from gr00t_p150.server.settings import SettingError, load_config

    c = load_config({"GR00T_VERSION": "n16", "GR00T_EMBODIMENT": "oxe_widowx"})
    assert (c.embodiment, c.layout) == ("oxe_widowx", "oxe_widowx")
    assert load_config({"GR00T_VERSION": "n16"}).layout == "gr1_n16"
    with pytest.raises(SettingError, match=r"GR00T_EMBODIMENT='oxe_droid_relative_eef_relative_joint': version n16 "
                                           r"serves \['gr1', 'unitree_g1', 'oxe_widowx'\]"):
        load_config({"GR00T_VERSION": "n16", "GR00T_EMBODIMENT": "oxe_droid_relative_eef_relative_joint"})
    with pytest.raises(SettingError, match="GR00T_LAYOUT='gr1': version n16 serves embodiment 'gr1' with layout"):
        load_config({"GR00T_VERSION": "n16", "GR00T_LAYOUT": "gr1"})
    c = load_config({"GR00T_VERSION": "n16", "GR00T_BACKEND": "ttnn"})  # ported (issue 46): no refusal
    assert (c.backend, c.layout, c.tt_num_cqs) == ("ttnn", "gr1_n16", 1)
    assert load_config({"GR00T_VERSION": "n16", "GR00T_BACKEND": "ttnn", "GR00T_EMBODIMENT": "oxe_widowx"}).layout \
        == "oxe_widowx"
    # G1's frame size is not known, and the TT model is built for static image grids: refused before any boot
    with pytest.raises(SettingError, match=r"GR00T_BACKEND=ttnn: layout 'unitree_g1' has no known frame size"):
        load_config({"GR00T_VERSION": "n16", "GR00T_BACKEND": "ttnn", "GR00T_EMBODIMENT": "unitree_g1"})


def test_a_version_without_a_ttnn_port_is_still_refused_by_name(monkeypatch):
    """The generic refusal (``VersionSpec.ttnn_refusal``) for a future version without a TT-NN port, shown on an N1.6
    row with its port taken away: settings refuse GR00T_BACKEND=ttnn with the reason, auto picks torch on a card."""
    from dataclasses import replace

    from gr00t_p150.backends import registry
    from gr00t_p150.server.settings import SettingError, load_config
    from models.experimental.gr00t.common import versions
    from models.experimental.gr00t.tt import runner

    refused = replace(versions.SPECS["n16"], ttnn_refusal="its TT-NN port is not written", tt_policy_cls=None,
                      tt_model_builder=None, tt_device_tensors=None, tt_blank_inputs=None)
    monkeypatch.setitem(versions.SPECS, "n16", refused)
    with pytest.raises(SettingError, match=r"GR00T_BACKEND=ttnn: GR00T_VERSION=n16 cannot run there: its TT-NN port"):
        load_config({"GR00T_VERSION": "n16", "GR00T_BACKEND": "ttnn"})
    monkeypatch.setattr(runner, "device_present", lambda: True)
    name, reason = registry.choose("auto", version="n16", mock=False)
    assert name == "torch" and "its TT-NN port is not written" in reason
    monkeypatch.setitem(versions.SPECS, "n16", replace(refused, ttnn_refusal=None, tt_policy_cls="p:c",
                                                       tt_model_builder="p:b", tt_device_tensors="p:d",
                                                       tt_blank_inputs="p:i"))
    assert registry.choose("auto", version="n16", layout="gr1_n16")[0] == "ttnn"
    name, reason = registry.choose("auto", version="n16", layout="unitree_g1")  # a layout the port cannot serve
    assert name == "torch" and "layout 'unitree_g1' has no known frame size" in reason


def test_smoke_test_passes_against_a_live_n16_server(server_env, tmp_path):
    env = {**server_env, "GR00T_VERSION": "n16", "GR00T_EMBODIMENT": "oxe_widowx"}
    out = smoke_test_on_a_live_server(env, tmp_path / "server.log")
    assert "(stage reference-fp32-cpu;" in out, out
