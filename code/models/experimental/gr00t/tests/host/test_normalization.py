# SPDX-License-Identifier: Apache-2.0
"""GR1 state sin/cos layout and min–max un-normalisation follow NVIDIA's N1.5 ``StateActionSinCosTransform`` and
``StateActionTransform`` (``gr00t/data/transform/state_action.py``)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from models.experimental.gr00t.common.errors import ConfigError
from models.experimental.gr00t.common.layouts import GR1
from models.experimental.gr00t.common.normalization_n15 import ActionStats, encode_state, unnormalize


def test_state_layout_matches_the_spec_table():
    rng = np.random.default_rng(0)
    state = {name: rng.uniform(-3, 3, dim) for name, dim in GR1.state_groups}
    vec = encode_state(state, GR1, 64).numpy().reshape(64)
    # upstream order: 0–6 sin(left_arm), 7–13 cos(left_arm), 14–20 sin(right_arm), 21–27 cos(right_arm),
    # 28–33 sin(left_hand), 34–39 cos(left_hand), 40–45 sin(right_hand), 46–51 cos(right_hand), 52–63 zero
    table = [(0, 7, np.sin, "left_arm"), (7, 14, np.cos, "left_arm"), (14, 21, np.sin, "right_arm"),
             (21, 28, np.cos, "right_arm"), (28, 34, np.sin, "left_hand"), (34, 40, np.cos, "left_hand"),
             (40, 46, np.sin, "right_hand"), (46, 52, np.cos, "right_hand")]
    for lo, hi, fn, name in table:
        np.testing.assert_array_equal(vec[lo:hi], fn(state[name]).astype(np.float32))
    assert not vec[52:].any()


def test_min_max_unnormalisation_without_clipping(tiny_checkpoint):
    stats = ActionStats.from_metadata(tiny_checkpoint, GR1)
    meta = json.loads((tiny_checkpoint / "experiment_cfg/metadata.json").read_text())["gr1"]["statistics"]["action"]
    chunk = np.random.default_rng(0).uniform(-1.5, 1.5, (16, 32)).astype(np.float32)  # beyond ±1 on purpose
    out = unnormalize(chunk, stats, GR1)
    assert list(out) == ["left_arm", "right_arm", "left_hand", "right_hand"]
    start = 0
    for name, dim in GR1.action_groups:
        lo, hi = np.array(meta[name]["min"]), np.array(meta[name]["max"])
        expected = (chunk[:, start:start + dim].astype(np.float64) + 1) / 2 * (hi - lo) + lo
        np.testing.assert_allclose(out[name], expected, rtol=0, atol=1e-6)
        assert out[name].dtype == np.float32 and out[name].shape == (16, dim)
        start += dim
    assert (out["left_arm"] > np.array(meta["left_arm"]["max"])).any()  # no clipping


def test_metadata_with_a_wrong_group_size_is_refused(tmp_path, tiny_checkpoint):
    broken = shutil.copytree(tiny_checkpoint, tmp_path / "broken")
    path = broken / "experiment_cfg/metadata.json"
    meta = json.loads(path.read_text())
    meta["gr1"]["statistics"]["action"]["left_hand"]["min"] = [0.0] * 5
    path.write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="left_hand.*6 dims"):
        ActionStats.from_metadata(broken, GR1)
