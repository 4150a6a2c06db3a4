# SPDX-License-Identifier: Apache-2.0
"""N1.7 DROID state normalisation and action decoding equal NVIDIA's ``StateActionProcessor`` formulas (q01/q99
state normalisation with clip; clip, min–max un-normalisation and relative composition ``T_abs = T_ref @ T_rel``
of the actions) computed here from statistics.json with numpy and 4×4 homogeneous matrices, and the
statistics loader refuses checkpoints whose processor or embodiment map it does not implement."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from models.experimental.gr00t.common.errors import ConfigError
from models.experimental.gr00t.common.layouts import DROID
from models.experimental.gr00t.common.normalization_n17 import (DroidStats, decode_actions, encode_actions,
                                                                normalize_state)

TAG = "oxe_droid_relative_eef_relative_joint"
HORIZON, MAX_DIM = 40, 132
STAT_FILES = ("statistics.json", "processor_config.json", "embodiment_id.json")


@pytest.fixture(scope="module")
def raw_stats(tiny_checkpoint_n17):
    """statistics.json for DROID, read with json (not through the loader under test)."""
    return json.loads((tiny_checkpoint_n17 / "statistics.json").read_text())[TAG]


@pytest.fixture(scope="module")
def stats(tiny_checkpoint_n17):
    return DroidStats.from_checkpoint(tiny_checkpoint_n17, DROID, HORIZON)


def stats_copy(tmp_path: Path, checkpoint: Path) -> Path:
    """The three statistics files in a fresh directory, to be edited by a test."""
    out = tmp_path / "stats"
    out.mkdir()
    for name in STAT_FILES:
        shutil.copyfile(checkpoint / name, out / name)
    return out


def edit_json(path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


# ---- independent SE(3) algebra --------------------------------------------------------------------
def rodrigues(axis, angle: float) -> np.ndarray:
    x, y, z = np.asarray(axis, float) / np.linalg.norm(axis)
    k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


def gram_schmidt_rows(r6: np.ndarray) -> np.ndarray:
    """rot6d (two rows, not necessarily orthonormal) → rotation whose rows are a1, a2, a1 × a2."""
    u, v = np.asarray(r6[:3], float), np.asarray(r6[3:], float)
    a1 = u / np.linalg.norm(u)
    a2 = v - np.dot(a1, v) * a1
    a2 = a2 / np.linalg.norm(a2)
    return np.array([a1, a2, np.cross(a1, a2)])


def homogeneous(eef9: np.ndarray) -> np.ndarray:
    t = np.eye(4)
    t[:3, :3] = gram_schmidt_rows(eef9[3:9])
    t[:3, 3] = eef9[:3]
    return t


def eef9_of(t: np.ndarray) -> np.ndarray:
    return np.concatenate([t[:3, 3], t[0, :3], t[1, :3]])


def droid_state(rng: np.random.Generator) -> dict[str, np.ndarray]:
    r = rodrigues(rng.normal(size=3), rng.uniform(-np.pi, np.pi))
    return {"eef_9d": np.concatenate([rng.uniform(-0.5, 0.5, 3), r[0], r[1]]),
            "gripper_position": rng.uniform(0, 1, 1), "joint_position": rng.uniform(-2, 2, 7)}


def unnormalise(y: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return (np.clip(y, -1.0, 1.0) + 1.0) / 2.0 * (hi - lo) + lo


# ---- state ------------------------------------------------------------------------------------------
def test_state_is_2x_minus_q01_over_range_minus_1_clipped_in_eef_gripper_joint_order(stats, raw_stats):
    where = np.random.default_rng(0).permutation(np.linspace(-0.5, 1.5, 17))  # position in [q01, q99] units
    state, expected, start = {}, [], 0
    for key, dim in (("eef_9d", 9), ("gripper_position", 1), ("joint_position", 7)):
        q01, q99 = np.array(raw_stats["state"][key]["q01"]), np.array(raw_stats["state"][key]["q99"])
        span = q99 - q01
        state[key] = q01 + span * where[start:start + dim]  # half of the dims outside [q01, q99]
        start += dim
        expected.append(np.clip(2.0 * (state[key] - q01) / span - 1.0, -1.0, 1.0))
    expected = np.concatenate(expected)
    assert (np.abs(expected) == 1.0).sum() >= 4 and (np.abs(expected) < 1.0).sum() >= 4  # clip exercised both ways

    out = normalize_state(state, stats, DROID, MAX_DIM)
    assert out.shape == (1, 1, MAX_DIM) and str(out.dtype) == "torch.float32"
    vec = out.numpy().reshape(MAX_DIM)
    np.testing.assert_allclose(vec[:17], expected.astype(np.float32), rtol=0, atol=1e-7)
    assert not vec[17:].any()  # zero padding up to max_state_dim


def test_state_groups_land_at_0_9_then_9_then_10_17():
    """Each group normalised against distinct statistics lands in its own slice: eef 0:9, gripper 9,
    joints 10:17 (the modality-key order), whatever order the request dict has."""
    stats = DroidStats(state_q01={"eef_9d": np.zeros(9), "gripper_position": np.zeros(1),
                                  "joint_position": np.zeros(7)},
                       state_q99={"eef_9d": np.full(9, 4.0), "gripper_position": np.full(1, 4.0),
                                  "joint_position": np.full(7, 4.0)},
                       action_lo={}, action_hi={})
    state = {"joint_position": np.full(7, 3.0), "gripper_position": np.full(1, 2.0), "eef_9d": np.full(9, 1.0)}
    vec = normalize_state(state, stats, DROID, MAX_DIM).numpy().reshape(MAX_DIM)
    np.testing.assert_array_equal(vec[:17], [-0.5] * 9 + [0.0] + [0.5] * 7)  # 2·x/4 − 1


def test_a_flat_state_dimension_normalises_to_zero(tmp_path, tiny_checkpoint_n17, raw_stats):
    directory = stats_copy(tmp_path, tiny_checkpoint_n17)

    def flatten(data):
        s = data[TAG]["state"]
        s["joint_position"]["q99"][2] = s["joint_position"]["q01"][2]
        s["gripper_position"]["q99"][0] = s["gripper_position"]["q01"][0]

    edit_json(directory / "statistics.json", flatten)
    flat = DroidStats.from_checkpoint(directory, DROID, HORIZON)
    rng = np.random.default_rng(1)
    state = droid_state(rng)
    state["joint_position"][2] = 123.0  # far outside any range: would clip to +1 if the dim were not flat
    state["gripper_position"][0] = -55.0
    vec = normalize_state(state, flat, DROID, MAX_DIM).numpy().reshape(MAX_DIM)
    assert vec[9] == 0.0 and vec[12] == 0.0
    q01, q99 = (np.array(raw_stats["state"]["joint_position"][k]) for k in ("q01", "q99"))
    others = [0, 1, 3, 4, 5, 6]
    expected = np.clip(2 * (state["joint_position"][others] - q01[others]) / (q99 - q01)[others] - 1, -1, 1)
    np.testing.assert_allclose(vec[10:17][others], expected, rtol=0, atol=1e-7)  # neighbours unaffected


# ---- actions ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def decoded(stats):
    rng = np.random.default_rng(2)
    chunk = rng.uniform(-2.0, 2.0, (HORIZON, MAX_DIM)).astype(np.float32)  # half of it outside [−1, 1]
    state = droid_state(rng)
    return chunk, state, decode_actions(chunk, state, stats, DROID)


def test_decoded_actions_are_float32_per_key_over_the_40_step_horizon(decoded):
    _, _, out = decoded
    assert list(out) == ["eef_9d", "gripper_position", "joint_position"]
    assert {k: (v.shape, v.dtype) for k, v in out.items()} == {
        "eef_9d": ((40, 9), np.float32), "gripper_position": ((40, 1), np.float32),
        "joint_position": ((40, 7), np.float32)}


def test_joints_are_state_plus_per_step_relative_min_max_with_clipping(decoded, raw_stats):
    chunk, state, out = decoded
    lo, hi = (np.array(raw_stats["relative_action"]["joint_position"][k]) for k in ("min", "max"))
    assert lo.shape == (40, 7) and not np.allclose(lo[0], lo[39])  # per-step rows differ, so row k matters
    y = chunk[:, 10:17].astype(np.float64)
    assert (np.abs(y) > 1).mean() > 0.3
    expected = state["joint_position"] + unnormalise(y, lo, hi)  # row k of min/max for step k
    np.testing.assert_allclose(out["joint_position"], expected.astype(np.float32), rtol=1e-6, atol=1e-6)
    unclipped = state["joint_position"] + (y + 1) / 2 * (hi - lo) + lo
    assert np.abs(out["joint_position"] - unclipped).max() > 0.1  # the clip changed the answer
    step0_only = state["joint_position"] + unnormalise(y, lo[0], hi[0])
    assert np.abs(out["joint_position"] - step0_only).max() > 0.1  # not one row for every step


def test_gripper_is_absolute_with_action_q01_q99_not_min_max(stats, raw_stats):
    g = raw_stats["action"]["gripper_position"]
    q01, q99, mn, mx = (np.array(g[k]) for k in ("q01", "q99", "min", "max"))
    assert abs(q01[0] - mn[0]) > 1e-3 and abs(q99[0] - mx[0]) > 1e-3
    chunk = np.zeros((HORIZON, MAX_DIM), np.float32)
    chunk[:, 9] = np.linspace(-3.0, 3.0, HORIZON)
    state = droid_state(np.random.default_rng(3))
    out = decode_actions(chunk, state, stats, DROID)["gripper_position"][:, 0]
    expected = unnormalise(chunk[:, 9].astype(np.float64), q01, q99)
    np.testing.assert_allclose(out, expected.astype(np.float32), rtol=1e-6, atol=1e-7)
    assert out[0] == np.float32(q01[0]) and out[-1] == np.float32(q99[0])  # saturates at the percentiles
    state["gripper_position"][0] = 0.9
    assert np.array_equal(decode_actions(chunk, state, stats, DROID)["gripper_position"][:, 0], out)  # not relative


def test_eef_equals_reference_times_relative_as_4x4_matrices(decoded, raw_stats):
    chunk, state, out = decoded
    lo, hi = (np.array(raw_stats["relative_action"]["eef_9d"][k]) for k in ("min", "max"))
    relative = unnormalise(chunk[:, 0:9].astype(np.float64), lo, hi)  # [40, 9], rot6d not orthonormal
    t_ref = homogeneous(state["eef_9d"])
    expected = np.stack([eef9_of(t_ref @ homogeneous(relative[k])) for k in range(HORIZON)])
    np.testing.assert_allclose(out["eef_9d"], expected.astype(np.float32), rtol=1e-5, atol=1e-6)
    left = np.stack([eef9_of(homogeneous(relative[k]) @ t_ref) for k in range(HORIZON)])
    assert np.abs(out["eef_9d"] - left).max() > 1e-2  # right-composition, not left


def test_decoded_eef_rotations_are_proper_rotations(decoded):
    _, _, out = decoded
    rows = out["eef_9d"][:, 3:9].astype(np.float64).reshape(HORIZON, 2, 3)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.sum(rows[:, 0] * rows[:, 1], axis=-1), 0.0, atol=1e-6)


def test_padding_dimensions_17_to_131_do_not_affect_the_actions(decoded, stats):
    chunk, state, out = decoded
    other = chunk.copy()
    other[:, 17:] = np.random.default_rng(4).normal(0, 5, (HORIZON, MAX_DIM - 17))
    again = decode_actions(other, state, stats, DROID)
    assert all(np.array_equal(out[k], again[k]) for k in out)


# ---- loader refusals --------------------------------------------------------------------------------
def _processor(fn):
    return "processor_config.json", lambda d: fn(d["processor_kwargs"])


@pytest.mark.parametrize("file, edit, message", [
    (*_processor(lambda p: p.update(use_albumentations=False)), "use_albumentations=False"),
    (*_processor(lambda p: p.pop("use_albumentations")), "use_albumentations=None"),
    (*_processor(lambda p: p.update(crop_fraction=0.9)), "crop_fraction=0.9"),
    (*_processor(lambda p: p.update(formalize_language=False)), "formalize_language=False"),
    ("processor_config.json", lambda d: d.pop("processor_kwargs"), "use_albumentations=None"),
    ("embodiment_id.json", lambda d: d.update({TAG: 25}), "maps to 25, expected 24"),
    ("embodiment_id.json", lambda d: d.pop(TAG), "maps to None, expected 24"),
    ("statistics.json", lambda d: d[TAG]["relative_action"]["eef_9d"].update(min=[[0.0] * 9] * 39),
     r"eef_9d statistics have shape \[39, 9\], expected \[40, 9\]"),
    ("statistics.json", lambda d: d[TAG]["relative_action"].pop("joint_position"), "missing statistics"),
    ("statistics.json", lambda d: d[TAG]["state"]["joint_position"].update(q01=[0.0] * 6), "joint_position.*7 dims"),
    ("statistics.json", lambda d: d.pop(TAG), "missing statistics"),
], ids=["no_albumentations", "albumentations_missing", "other_crop", "no_formalize", "no_kwargs",
        "droid_mapped_elsewhere", "droid_not_mapped", "relative_39_steps", "no_relative_joint", "state_6_dims",
        "no_droid_statistics"])
def test_unsupported_or_malformed_statistics_files_are_refused(tmp_path, tiny_checkpoint_n17, file, edit, message):
    directory = stats_copy(tmp_path, tiny_checkpoint_n17)
    edit_json(directory / file, edit)
    with pytest.raises(ConfigError, match=message) as err:
        DroidStats.from_checkpoint(directory, DROID, HORIZON)
    assert file in str(err.value)


def test_a_missing_statistics_file_is_refused_naming_it(tmp_path, tiny_checkpoint_n17):
    directory = stats_copy(tmp_path, tiny_checkpoint_n17)
    (directory / "embodiment_id.json").unlink()
    with pytest.raises(ConfigError, match="embodiment_id.json: not found"):
        DroidStats.from_checkpoint(directory, DROID, HORIZON)


def _droid_modality(fn):
    return "processor_config.json", lambda d: fn(d["processor_kwargs"]["modality_configs"][TAG])


# Each of these settings changes upstream's image or state/action processing; serving them with this
# implementation's fixed chain would be silently wrong, so they are refused.
@pytest.mark.parametrize("file, edit", [
    _processor(lambda p: p.update(letter_box_transform=True)),
    _processor(lambda p: p.update(use_mean_std=True)),
    _processor(lambda p: p.update(apply_sincos_state_encoding=True)),
    _droid_modality(lambda m: m["action"]["action_configs"][2].update(rep="ABSOLUTE")),
    _droid_modality(lambda m: m["state"].update(modality_keys=["joint_position", "gripper_position", "eef_9d"])),
], ids=["letter_box", "mean_std", "sincos_state", "joint_absolute", "state_key_order"])
def test_processor_settings_that_change_the_chain_are_refused(tmp_path, tiny_checkpoint_n17, file, edit):
    directory = stats_copy(tmp_path, tiny_checkpoint_n17)
    edit_json(directory / file, edit)
    try:
        DroidStats.from_checkpoint(directory, DROID, HORIZON)
    except ConfigError:
        return
    pytest.fail(f"{file} edited to an unsupported setting was accepted")


# ---- RTC: the previous chunk re-expressed against a new state -----------------------------------------
def test_encoding_absolute_actions_against_a_new_state_round_trips_through_decoding(stats):
    """RTC for N1.7 freezes the previous chunk's absolute actions at the new chunk's first steps: encoded
    against the new request's state with the statistics of steps 0 … d−1, then decoded as the model's output
    would be, they come back (fp64 math, a float32 model space: ≤ 1e-5). Checked against the independent 4×4
    algebra: the encoded eef is T_new⁻¹ T_abs, un-normalised."""
    import dataclasses

    # ranges wide enough to hold every re-expressed action (the tiny synthetic statistics' relative rot6d
    # range leaves out the identity, so there the frozen eef would be clipped: the next test)
    narrow, stats = stats, dataclasses.replace(stats, action_lo={k: v - 10.0 for k, v in stats.action_lo.items()},
                                action_hi={k: v + 10.0 for k, v in stats.action_hi.items()})
    rng = np.random.default_rng(5)
    old_state, new_state = droid_state(rng), droid_state(rng)
    chunk = rng.uniform(-0.9, 0.9, (HORIZON, MAX_DIM)).astype(np.float32)  # inside the statistics' range
    old = decode_actions(chunk, old_state, narrow, DROID)
    offset, d = 3, 6
    prefix = {k: v[offset:offset + d] for k, v in old.items()}
    y = encode_actions(prefix, new_state, stats, DROID)
    assert y.shape == (d, 17) and y.dtype == np.float32
    padded = np.zeros((HORIZON, MAX_DIM), np.float32)
    padded[:d, :17] = y
    again = decode_actions(padded, new_state, stats, DROID)
    for key, value in prefix.items():
        np.testing.assert_allclose(again[key][:d], value, rtol=0, atol=1e-5, err_msg=key)
    t_rel = np.linalg.inv(homogeneous(new_state["eef_9d"])) @ homogeneous(prefix["eef_9d"][0].astype(np.float64))
    lo, hi = stats.action_lo["eef_9d"][0], stats.action_hi["eef_9d"][0]
    np.testing.assert_allclose(unnormalise(y[0, :9].astype(np.float64), lo, hi), eef9_of(t_rel), atol=1e-5)
    # the new state matters: the same absolute actions against the old state encode differently
    assert np.abs(encode_actions(prefix, old_state, stats, DROID) - y).max() > 1e-2


def test_an_action_outside_the_statistics_is_clipped_to_the_range_decoding_reads(stats):
    rng = np.random.default_rng(6)
    state = droid_state(rng)
    far = {"eef_9d": np.tile(state["eef_9d"], (2, 1)), "gripper_position": np.full((2, 1), 1e6),
           "joint_position": np.tile(state["joint_position"], (2, 1)) + 1e6}
    y = encode_actions(far, state, stats, DROID)
    assert y[:, 9].tolist() == [1.0, 1.0] and (y[:, 10:17] == 1.0).all()
