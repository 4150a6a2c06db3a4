# SPDX-License-Identifier: Apache-2.0
"""The published response contract on the real torch backend (tiny synthetic weights)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from .conftest import assert_matches_golden


def test_importing_the_app_has_no_side_effects():
    code = ("import sys, gr00t_p150.server.app as a; assert a.app; "
            "bad = [m for m in sys.modules if m in ('ttnn', 'torch') or m.startswith('models.experimental.gr00t')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_tt_settings_default_and_bad_values_name_the_variable():
    from gr00t_p150.server import settings

    c = settings.load_config({"GR00T_VERSION": "n15", "GR00T_CACHE": "/x"})
    assert (c.tt_policy, c.tt_trace_layout, str(c.tt_cache), c.tt_mock) == ("mixed_dit", "per_stage", "/x/tt", False)
    for name, value in (("GR00T_POLICY", "fp8"), ("GR00T_TRACE_LAYOUT", "one"), ("GR00T_TT_MOCK", "yes"),
                        ("GR00T_NUM_CQS", "3"), ("GR00T_NUM_CQS", "two")):
        with pytest.raises(settings.SettingError, match=name):
            settings.load_config({"GR00T_VERSION": "n15", name: value})
    # the command queues the published packages run: 1 for N1.5, 2 for N1.7 (N1.6, unpublished: 1); any overridden
    assert [settings.load_config({"GR00T_VERSION": v}).tt_num_cqs for v in ("n15", "n16", "n17")] == [1, 1, 2]
    assert settings.load_config({"GR00T_VERSION": "n17", "GR00T_NUM_CQS": "1"}).tt_num_cqs == 1


@pytest.mark.golden
def test_demo_response_has_every_published_field(client, demo, request_body, reference_answer):
    r = client.post("/predict", json=request_body)
    assert r.status_code == 200, r.text
    body = r.json()
    for key in ("actions", "action_horizon", "action_keys", "action_dims", "normalized", "embodiment", "embodiment_id",
                "version", "model", "layout", "images", "seq_len", "prompt_tokens", "state_dtype", "noise_source",
                "seed", "timing_ms"):
        assert key in body, key
    assert body["action_keys"] == ["left_arm", "right_arm", "left_hand", "right_hand"]
    assert body["action_dims"] == {"left_arm": 7, "right_arm": 7, "left_hand": 6, "right_hand": 6}
    assert {k: np.shape(v) for k, v in body["actions"].items()} == {"left_arm": (16, 7), "right_arm": (16, 7),
                                                                     "left_hand": (16, 6), "right_hand": (16, 6)}
    assert (body["action_horizon"], body["normalized"], body["embodiment"],
            body["embodiment_id"]) == (16, False, "gr1", 24)
    assert (body["version"], body["layout"], body["seq_len"], body["prompt_tokens"]) == ("n15", "gr1", 296, 14)
    assert body["model"] == "GR00T-N1.5-3B-p150"  # the published package's name; `backend` says where it ran
    assert body["images"] == {"ego_view": {"frames": 1, "received_hw": [256, 256]}}
    assert (body["state_dtype"], body["noise_source"], body["seed"]) == ("float64", "client", None)
    assert set(body["timing_ms"]) == {"decode", "encode", "device", "decode_actions", "total"}
    assert body["timing_ms"]["total"] >= body["timing_ms"]["device"] > 0
    # random weights must never pass for a policy
    assert body["weights"]["synthetic"] is True and "SYNTHETIC" in body["warning"]
    # the fp32 CPU backend is the reference: bit-identical to it in this process, and within the
    # cross-machine rule of the shipped golden (made on another CPU)
    assert body["actions"] == reference_answer["actions"]
    assert_matches_golden(body["actions"], demo["expected"]["actions"])
    assert "server-timing" in r.headers and r.headers["x-request-id"]


@pytest.mark.golden
def test_return_normalized_adds_the_model_space_chunk(client, demo, request_body, reference_answer):
    body = client.post("/predict", json={**request_body, "return_normalized": True}).json()
    assert np.shape(body["action_pred_normalized"]) == (16, 32)
    assert body["action_pred_normalized"] == reference_answer["action_pred_normalized"]
    assert_matches_golden({"chunk": body["action_pred_normalized"]},
                          {"chunk": demo["expected"]["action_pred_normalized"]})
    assert "action_pred_normalized" not in client.post("/predict", json=request_body).json()


def test_seed_default_and_determinism(client, request_body):
    del request_body["noise"]
    default = client.post("/predict", json=request_body).json()
    assert (default["noise_source"], default["seed"]) == ("seed", 0)
    zero = client.post("/predict", json={**request_body, "seed": 0}).json()
    assert zero["actions"] == default["actions"]
    seven = [client.post("/predict", json={**request_body, "seed": 7}).json()["actions"] for _ in range(2)]
    assert seven[0] == seven[1] != default["actions"]


def test_state_dtype_float32_is_honoured(client, request_body):
    body = client.post("/predict", json={**request_body, "state_dtype": "float32"}).json()
    assert body["state_dtype"] == "float32"


def test_state_as_a_flat_list_equals_one_time_step(client, request_body):
    nested = client.post("/predict", json=request_body).json()
    flat = {**request_body, "state": {k: v[0] for k, v in request_body["state"].items()}}
    assert client.post("/predict", json=flat).json()["actions"] == nested["actions"]


def test_health_info_demo_and_models(client, server_config):
    assert client.get("/health").json()["status"] == "ok"
    info = client.get("/info").json()
    assert info["contract"]["state"]["groups"] == {"left_arm": 7, "right_arm": 7, "left_hand": 6, "right_hand": 6}
    assert info["contract"]["instruction"]["max_tokens"] == 102
    assert info["weights"]["synthetic"] is True and info["weights"]["source"] == "synthetic:tiny"
    assert info["backend"]["name"] == "torch" and info["backend"]["device"] == "cpu"
    assert info["stage"] == "reference-fp32-cpu"  # top level, as the published package's /info has it
    assert info["fidelity"]["passed"] is True and info["fidelity"]["golden"] == "shipped"
    assert info["fidelity"]["pcc"] >= server_config.warmup_pcc_min
    assert info["warmup"]["runs"] == server_config.warmup_runs and info["warmup"]["median_ms"] > 0
    note = client.get("/demo").json()["note"]  # says what is true across machines: the rule of common/quality.py
    assert "bit-identical on the machine and software that computed `expected`" in note and "1e-05" in note
    models = client.get("/v1/models").json()
    assert models["data"] and models["data"][0]["id"] == "GR00T-N1.5-3B-p150"
    json.dumps(info)  # JSON-serialisable throughout
