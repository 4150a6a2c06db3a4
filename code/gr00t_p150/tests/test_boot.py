# SPDX-License-Identifier: Apache-2.0
"""Boot: configuration errors name the variable, the fidelity gate refuses a wrong golden, and
unavailable backends or weights fail with one line saying what to do."""

from __future__ import annotations

import json
import os

import pytest
from fastapi.testclient import TestClient
from gr00t_p150.server.app import create_app
from gr00t_p150.server.exceptions import BootError
from gr00t_p150.server.settings import SettingError, load_config, parse_mesh_shape

from .conftest import with_config


def test_mesh_shape_spellings():
    assert parse_mesh_shape("1x1") == parse_mesh_shape("(1, 1)") == parse_mesh_shape("1,1") == (1, 1)
    assert parse_mesh_shape("2x4") == (2, 4)
    with pytest.raises(SettingError, match="TT_MESH_SHAPE"):
        parse_mesh_shape("0x1")


@pytest.mark.parametrize(
    "env, variable",
    [({}, "GR00T_VERSION"), ({"GR00T_VERSION": "n99"}, "GR00T_VERSION"),
     ({"GR00T_VERSION": "n15", "GR00T_BACKEND": "tpu"}, "GR00T_BACKEND"),
     ({"GR00T_VERSION": "n15", "GR00T_WARMUP_RUNS": "many"}, "GR00T_WARMUP_RUNS"),
     ({"GR00T_VERSION": "n15", "GR00T_WARMUP_PCC_MIN": "1.5"}, "GR00T_WARMUP_PCC_MIN"),
     ({"GR00T_VERSION": "n15", "TT_WEIGHTS_REVISION": "main"}, "TT_WEIGHTS_REVISION"),
     ({"GR00T_VERSION": "n15", "GR00T_LAYOUT": "droid"}, "GR00T_LAYOUT"),
     ({"GR00T_VERSION": "n15", "GR00T_EMBODIMENT": "oxe_droid"}, "GR00T_EMBODIMENT"),
     ({"GR00T_VERSION": "n15", "GR00T_WEIGHTS": "/no/such/dir"}, "GR00T_WEIGHTS"),
     ({"GR00T_VERSION": "n15", "TT_MESH_SHAPE": "big"}, "TT_MESH_SHAPE"),
     ({"GR00T_VERSION": "n15", "GR00T_FRAME_WORKERS": "0"}, "GR00T_FRAME_WORKERS"),
     ({"GR00T_VERSION": "n15", "GR00T_FRAME_WORKERS": "17"}, "GR00T_FRAME_WORKERS")],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_bad_settings_name_the_variable(env, variable):
    with pytest.raises(SettingError, match=variable):
        load_config(env)


def test_defaults_follow_the_published_manifest():
    c = load_config({"GR00T_VERSION": "n15"})
    assert (c.embodiment, c.layout, c.weights, c.backend) == ("gr1", "gr1", "hub", "auto")
    assert (c.warmup_runs, c.warmup_pcc_min, c.mesh_shape) == (3, 0.999, (1, 1))
    assert c.weights_revision == "869830fc749c35f34771aa5209f923ac57e4564e"
    assert c.frame_workers == min(4, os.cpu_count() or 1)
    assert load_config({"GR00T_VERSION": "n15", "GR00T_FRAME_WORKERS": "3"}).frame_workers == 3


def test_n17_defaults_follow_its_published_manifest():
    c = load_config({"GR00T_VERSION": "n17"})
    assert (c.embodiment, c.layout) == ("oxe_droid_relative_eef_relative_joint", "droid")
    assert c.weights_revision == "2fc962b973bccdd5d8ce4f67cc63b264d6886495"
    with pytest.raises(SettingError, match="GR00T_LAYOUT"):
        load_config({"GR00T_VERSION": "n17", "GR00T_LAYOUT": "gr1"})


def _boot(config):
    with TestClient(create_app(config)):
        pass


def test_gate_refuses_a_corrupted_golden(tmp_path, server_config, demo):
    golden = {"actions": demo["expected"]["actions"],
              "action_pred_normalized": [[-v for v in row] for row in demo["expected"]["action_pred_normalized"]]}
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(golden))
    with pytest.raises(BootError, match="fidelity gate failed: warm-up actions PCC -1.0"):
        _boot(with_config(server_config, golden=path))


def test_gate_accepts_a_correct_explicit_golden(tmp_path, server_config, demo):
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(demo["expected"]))
    with TestClient(create_app(with_config(server_config, golden=path))) as c:
        assert c.get("/info").json()["fidelity"]["golden"].startswith("file ")


def test_ttnn_backend_refuses_to_boot_with_a_clear_reason(server_config):
    with pytest.raises(BootError, match="GR00T_BACKEND=ttnn: no Tenstorrent device"):
        _boot(with_config(server_config, backend="ttnn"))
    with pytest.raises(BootError, match="GR00T_TT_MOCK=1 is the TT-NN test mode"):
        _boot(with_config(server_config, tt_mock=True))


def test_hub_weights_missing_offline_say_what_to_do(tmp_path, server_config, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(BootError, match="not in the Hugging Face cache.*GR00T_WEIGHTS=synthetic:tiny"):
        _boot(with_config(server_config, weights="hub"))


def test_local_snapshot_gets_a_cached_reference_golden(tmp_path, server_config, client):
    snapshot = client.app.state.engine.weights.path  # the generated tiny checkpoint, served as a local dir
    cfg = with_config(server_config, weights=str(snapshot), cache_dir=tmp_path / "cache")
    for expected_source in ("computed", "cached"):
        with TestClient(create_app(cfg)) as c:
            info = c.get("/info").json()
            assert info["weights"]["source"] == "local" and info["weights"]["synthetic"] is True
            assert info["fidelity"]["golden"].startswith(expected_source), info["fidelity"]


def test_the_fast_path_gets_its_golden_from_the_shared_reference(tmp_path, server_config, client):
    snapshot = client.app.state.engine.weights.path
    cfg = with_config(server_config, weights=str(snapshot), cache_dir=tmp_path / "cache", torch_path="fast")
    with TestClient(create_app(cfg)) as c:
        info = c.get("/info").json()
    assert info["backend"]["path"] == "fast"
    assert "sharing this backend's weights" in info["fidelity"]["golden"] and info["fidelity"]["passed"]


def test_gate_checks_every_varying_action_group(tmp_path, server_config, demo):
    """A group whose golden varies (spread > 0.2) must match at PCC >= 0.9999 even when the normalised chunk
    as a whole does; a near-constant group's PCC is reported, not gated."""
    import numpy as np

    good = demo["expected"]
    ramp = np.linspace(-1.0, 1.0, 16)
    wrong = {**good["actions"], "left_arm": [[float(v * (j % 2 * 2 - 1))] * 7 for j, v in enumerate(ramp)]}
    path = tmp_path / "golden.json"
    path.write_text(json.dumps({**good, "actions": wrong}))
    with pytest.raises(BootError, match="action group 'left_arm' PCC"):
        _boot(with_config(server_config, golden=path))
    flat = np.asarray(good["actions"]["right_hand"], dtype=np.float64)
    near_constant = {**good["actions"], "right_hand": (flat.mean() + 0.01 * np.sign(np.sin(np.arange(flat.size)))
                                                       .reshape(flat.shape)).tolist()}
    path.write_text(json.dumps({**good, "actions": near_constant}))
    with TestClient(create_app(with_config(server_config, golden=path))) as c:
        f = c.get("/info").json()["fidelity"]
    assert f["passed"] and f["per_group"]["right_hand"]["gated"] is False and f["per_group"]["right_hand"]["pcc"] < 0.9
