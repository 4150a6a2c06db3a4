# SPDX-License-Identifier: Apache-2.0
"""N1.6 state encoding and action decoding (spec ``gr00t_n16.md`` §4.4, §7) on the tiny synthetic checkpoint's
``statistics.json`` / ``processor_config.json``, for the three written tags (``gr1``, ``unitree_g1``, ``oxe_widowx``):
decode∘encode round trips, clipping at the bounds, relative keys (and only they) add the raw state, padding rows
and columns are ignored, the sin/cos layout and key order of the state vector follow the file, the horizon is sliced
per tag, and one GR1 decode is checked against the §7 equations written out by hand with numpy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from models.experimental.gr00t.common.errors import ConfigError
from models.experimental.gr00t.common.normalization_n16 import (N16Processing, decode_actions, encode_actions,
                                                                encode_state)

TAGS = ("gr1", "unitree_g1", "oxe_widowx")
# Spec §8: horizon and the RELATIVE action keys per tag.
HORIZON = {"gr1": 16, "unitree_g1": 30, "oxe_widowx": 8}
RELATIVE = {"gr1": {"left_arm", "right_arm", "left_hand", "right_hand"}, "unitree_g1": {"left_arm", "right_arm"},
            "oxe_widowx": set()}
CHUNK = (50, 128)
FILES = ("statistics.json", "processor_config.json", "embodiment_id.json")


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoints) -> Path:
    return tiny_checkpoints["n16"]


@pytest.fixture(scope="module")
def loaded(checkpoint):
    return {tag: N16Processing.from_checkpoint(checkpoint, tag) for tag in TAGS}


@pytest.fixture(scope="module")
def raw(checkpoint):
    """statistics.json, read with json (not through the module under test)."""
    return json.loads((checkpoint / "statistics.json").read_text())


def state_for(raw_stats: dict, tag: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A float32 state inside each key's min/max."""
    return {k: rng.uniform(np.asarray(v["min"]), np.asarray(v["max"])).astype(np.float32)
            for k, v in raw_stats[tag]["state"].items()}


def files_copy(tmp_path: Path, checkpoint: Path) -> Path:
    out = tmp_path / "ckpt"
    out.mkdir()
    for name in FILES:
        shutil.copyfile(checkpoint / name, out / name)
    return out


def edit_json(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


# ---- actions --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tag", TAGS)
def test_horizon_and_key_slices(tag, loaded, raw):
    proc, stats = loaded[tag]
    assert proc.horizon == HORIZON[tag]
    dims = {k: len(v["min"]) for k, v in raw[tag]["action"].items()}
    rng = np.random.default_rng(1)
    state = state_for(raw, tag, rng)
    chunk = rng.uniform(-0.9, 0.9, CHUNK).astype(np.float32)
    out = decode_actions(chunk, state, stats, proc)
    assert list(out) == list(raw[tag]["action"])  # modality order (the writer keeps it in statistics.json too)
    assert {k: v.shape for k, v in out.items()} == {k: (HORIZON[tag], d) for k, d in dims.items()}
    assert all(v.dtype == np.float32 for v in out.values())
    # Row horizon−1 is read, row horizon is not; each key reads its own consecutive columns.
    last, beyond = chunk.copy(), chunk.copy()
    last[HORIZON[tag] - 1] += 0.05
    beyond[HORIZON[tag]] += 0.05
    assert all(np.array_equal(decode_actions(beyond, state, stats, proc)[k], out[k]) for k in out)
    moved = decode_actions(last, state, stats, proc)
    assert all(not np.array_equal(moved[k][-1], out[k][-1]) for k in out)
    start = 0
    for key, dim in dims.items():
        poked = chunk.copy()
        poked[:, start] += 0.05
        changed = {k for k, v in decode_actions(poked, state, stats, proc).items() if not np.array_equal(v, out[k])}
        assert changed == {key}
        start += dim


@pytest.mark.parametrize("tag", TAGS)
def test_decode_encode_round_trip(tag, loaded, raw):
    proc, stats = loaded[tag]
    h, w = HORIZON[tag], proc.action_width
    rng = np.random.default_rng(2)
    state = state_for(raw, tag, rng)
    chunk = rng.uniform(-0.99, 0.99, CHUNK).astype(np.float32)
    actions = decode_actions(chunk, state, stats, proc)
    back = encode_actions(actions, state, stats, proc)
    assert back.shape == (h, w) and back.dtype == np.float32
    np.testing.assert_allclose(back, chunk[:h, :w], atol=2e-5)
    padded = np.zeros(CHUNK, np.float32)
    padded[:h, :w] = back
    again = decode_actions(padded, state, stats, proc)
    for key in actions:
        np.testing.assert_allclose(again[key], actions[key], rtol=1e-6, atol=1e-6)
    # A prefix of d rows uses the statistics of steps 0 … d−1.
    head = encode_actions({k: v[:5] for k, v in actions.items()}, state, stats, proc)
    np.testing.assert_array_equal(head, back[:5])
    # Against a new state, the relative keys are re-expressed: decoding with that state gives the same actions.
    other = state_for(raw, tag, rng)
    moved = encode_actions({k: v[:3] for k, v in actions.items()}, other, stats, proc)
    padded = np.zeros(CHUNK, np.float32)
    padded[:3, :w] = moved
    decoded = decode_actions(padded, other, stats, proc)
    for key in proc.action_keys:  # where the re-expressed action is inside the range (not clipped)
        inside = key.mean_std | (np.abs(moved[:, key.start:key.start + key.dim]) < 1 - 1e-6)
        assert inside.any()
        np.testing.assert_allclose(decoded[key.name][:3][inside], actions[key.name][:3][inside], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tag", TAGS)
def test_clipping_at_the_bounds(tag, loaded, raw):
    proc, stats = loaded[tag]
    h = HORIZON[tag]
    state = state_for(raw, tag, np.random.default_rng(3))
    for value, bound in ((5.0, "max"), (-5.0, "min"), (1.0, "max"), (-1.0, "min")):
        out = decode_actions(np.full(CHUNK, value, np.float32), state, stats, proc)
        for key in proc.action_keys:
            if key.mean_std:  # mean/std keys are never clipped
                s = raw[tag]["action"][key.name]
                want = value * np.asarray(s["std"]) + np.asarray(s["mean"])
            elif key.relative:
                want = np.asarray(raw[tag]["relative_action"][key.name][bound]) + state[key.name].astype(np.float64)
            else:
                want = np.asarray(raw[tag]["action"][key.name][bound])
            np.testing.assert_allclose(out[key.name], np.broadcast_to(want, (h, key.dim)).astype(np.float32),
                                       rtol=1e-6, atol=1e-6)
    # Encoding actions beyond the range saturates min/max keys at ±1 (what decoding reads back).
    far = {k.name: np.full((h, k.dim), 1e3 * sign) for k, sign in zip(proc.action_keys, np.tile([1, -1], 8))}
    enc = encode_actions(far, state, stats, proc)
    for key, sign in zip(proc.action_keys, np.tile([1, -1], 8)):
        cols = enc[:, key.start:key.start + key.dim]
        if key.mean_std:
            assert np.all(np.abs(cols) > 1)
        else:
            assert np.all(cols == sign)
    assert {k.name for k in proc.action_keys if k.mean_std} == (
        {"x", "y", "z", "roll", "pitch", "yaw"} if tag == "oxe_widowx" else set())


@pytest.mark.parametrize("tag", TAGS)
def test_only_relative_keys_add_the_state(tag, loaded, raw):
    proc, stats = loaded[tag]
    assert {k.name for k in proc.action_keys if k.relative} == RELATIVE[tag]
    rng = np.random.default_rng(4)
    chunk = rng.uniform(-1, 1, CHUNK).astype(np.float32)
    s1, s2 = state_for(raw, tag, rng), state_for(raw, tag, rng)
    a1, a2 = decode_actions(chunk, s1, stats, proc), decode_actions(chunk, s2, stats, proc)
    for key in a1:
        shift = (a2[key].astype(np.float64) - a1[key]).astype(np.float64)
        if key in RELATIVE[tag]:
            np.testing.assert_allclose(shift, np.broadcast_to(s2[key] - s1[key].astype(np.float64), shift.shape),
                                       atol=1e-6)
        else:
            assert np.all(shift == 0)


@pytest.mark.parametrize("tag", TAGS)
def test_padding_rows_and_columns_are_ignored(tag, loaded, raw):
    proc, stats = loaded[tag]
    h, w = HORIZON[tag], proc.action_width
    rng = np.random.default_rng(5)
    state = state_for(raw, tag, rng)
    chunk = rng.uniform(-1, 1, CHUNK).astype(np.float32)
    dirty = chunk.copy()
    dirty[h:] = np.nan
    dirty[:, w:] = 1e6
    clean, out = decode_actions(chunk, state, stats, proc), decode_actions(dirty, state, stats, proc)
    assert all(np.array_equal(out[k], clean[k]) and np.isfinite(out[k]).all() for k in clean)
    # The released envelope is wider than every tag's keys.
    assert w < 128 and h < 50


def test_decode_matches_the_spec_formula_for_gr1(loaded, raw):
    """§7 by hand: relative left_arm = (clip(y)+1)/2·(max_t − min_t) + min_t + state, per step t from the
    relative_action statistics (columns 0:7); absolute waist = (clip(y)+1)/2·(max − min) + min (columns 26:29)."""
    proc, stats = loaded["gr1"]
    rng = np.random.default_rng(6)
    chunk = rng.uniform(-1.3, 1.3, CHUNK).astype(np.float32)  # some values beyond ±1
    state = {"left_arm": np.array([0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7], np.float32),
             "right_arm": np.zeros(7, np.float32), "left_hand": np.zeros(6, np.float32),
             "right_hand": np.zeros(6, np.float32), "waist": np.array([9.0, 9.0, 9.0], np.float32)}
    out = decode_actions(chunk, state, stats, proc)

    rel = raw["gr1"]["relative_action"]["left_arm"]
    lo, hi = np.array(rel["min"]), np.array(rel["max"])  # (16, 7)
    assert lo.shape == (16, 7)
    y = np.minimum(np.maximum(chunk[:16, 0:7].astype(np.float64), -1.0), 1.0)
    want_arm = (y + 1.0) / 2.0 * (hi - lo) + lo + np.array([0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7], np.float32)
    np.testing.assert_allclose(out["left_arm"], want_arm, rtol=1e-6, atol=1e-6)

    ab = raw["gr1"]["action"]["waist"]
    lo, hi = np.array(ab["min"]), np.array(ab["max"])  # (3,)
    y = np.minimum(np.maximum(chunk[:16, 26:29].astype(np.float64), -1.0), 1.0)
    want_waist = (y + 1.0) / 2.0 * (hi - lo) + lo  # no state: the waist is absolute
    np.testing.assert_allclose(out["waist"], want_waist, rtol=1e-6, atol=1e-6)


# ---- state ----------------------------------------------------------------------------------------------------------
def test_gr1_state_is_sin_cos_in_modality_order(loaded, raw):
    proc, stats = loaded["gr1"]
    rng = np.random.default_rng(7)
    state = {k: rng.uniform(-4, 4, len(v["min"])).astype(np.float32) for k, v in raw["gr1"]["state"].items()}
    vec = encode_state(state, stats, proc)
    assert vec.shape == (128,) and vec.dtype == np.float32
    order = ("left_arm", "right_arm", "left_hand", "right_hand", "waist")  # spec §4.4: la, ra, lh, rh, waist
    want = np.concatenate([f(state[k].astype(np.float64)) for k in order for f in (np.sin, np.cos)])
    assert want.size == 58
    np.testing.assert_allclose(vec[:58], want, atol=1e-7)  # raw values, no normalisation, no clip
    assert np.all(vec[58:] == 0)


@pytest.mark.parametrize("tag", ("unitree_g1", "oxe_widowx"))
def test_min_max_state_with_clipping(tag, loaded, raw):
    proc, stats = loaded[tag]
    rng = np.random.default_rng(8)
    s = raw[tag]["state"]
    state = {k: rng.uniform(np.array(v["min"]) - 0.5, np.array(v["max"]) + 0.5).astype(np.float32)
             for k, v in s.items()}
    vec = encode_state(state, stats, proc)
    parts = []
    for key, v in s.items():  # statistics.json keeps the modality order
        lo, hi = np.array(v["min"]), np.array(v["max"])
        parts.append(np.clip(2 * (state[key].astype(np.float64) - lo) / (hi - lo) - 1, -1, 1))
    want = np.concatenate(parts)
    assert [k.name for k in proc.state_keys] == list(s) and np.any(np.abs(want) == 1)  # some were clipped
    np.testing.assert_allclose(vec[:want.size], want, atol=1e-6)
    assert np.all(vec[want.size:] == 0) and vec.shape == (128,)


def test_state_layout_follows_the_files(tmp_path, checkpoint, raw):
    """Key order, the sin/cos flag and mean/std keys come from processor_config.json, not from code."""
    ckpt = files_copy(tmp_path, checkpoint)
    rng = np.random.default_rng(9)
    state = state_for(raw, "gr1", rng)

    def edit(kwargs):
        kwargs["processor_kwargs"]["apply_sincos_state_encoding"] = False
        cfg = kwargs["processor_kwargs"]["modality_configs"]["gr1"]["state"]
        cfg["modality_keys"] = cfg["modality_keys"][::-1]  # waist first
        cfg["mean_std_embedding_keys"] = ["right_arm"]

    edit_json(ckpt / "processor_config.json", edit)
    proc, stats = N16Processing.from_checkpoint(ckpt, "gr1")
    vec = encode_state(state, stats, proc)
    parts = []
    for key in ("waist", "right_hand", "left_hand", "right_arm", "left_arm"):
        v, x = raw["gr1"]["state"][key], state[key].astype(np.float64)
        if key == "right_arm":
            parts.append((x - np.array(v["mean"])) / np.array(v["std"]))
        else:
            parts.append(np.clip(2 * (x - np.array(v["min"])) / (np.array(v["max"]) - np.array(v["min"])) - 1, -1, 1))
    want = np.concatenate(parts)
    assert want.size == 29
    np.testing.assert_allclose(vec[:29], want, atol=1e-6)
    assert np.all(vec[29:] == 0)


def test_flat_range_and_zero_std(tmp_path, checkpoint, raw):
    ckpt = files_copy(tmp_path, checkpoint)

    def edit(s):
        s["oxe_widowx"]["state"]["x"]["max"] = s["oxe_widowx"]["state"]["x"]["min"]
        s["oxe_widowx"]["action"]["x"]["std"] = [0.0]
        s["oxe_widowx"]["action"]["gripper"]["max"] = s["oxe_widowx"]["action"]["gripper"]["min"]

    edit_json(ckpt / "statistics.json", edit)
    proc, stats = N16Processing.from_checkpoint(ckpt, "oxe_widowx")
    state = state_for(raw, "oxe_widowx", np.random.default_rng(10))
    assert encode_state(state, stats, proc)[0] == 0  # flat range → 0
    chunk = np.full(CHUNK, 0.7, np.float32)
    out = decode_actions(chunk, state, stats, proc)
    np.testing.assert_allclose(out["x"], 0.7)  # std 0: passes through
    np.testing.assert_allclose(out["gripper"], raw["oxe_widowx"]["action"]["gripper"]["min"][0])
    enc = encode_actions(out, state, stats, proc)
    np.testing.assert_allclose(enc[:, 0], 0.7, rtol=1e-6)
    assert np.all(enc[:, 6] == 0)


# ---- the loader -----------------------------------------------------------------------------------------------------
def test_loader_reads_rows_and_envelope(loaded):
    assert {tag: p.embodiment_id for tag, (p, _) in loaded.items()} == {"gr1": 20, "unitree_g1": 8, "oxe_widowx": 1}
    assert {tag: p.state_width for tag, (p, _) in loaded.items()} == {"gr1": 58, "unitree_g1": 43, "oxe_widowx": 8}
    assert all((p.max_state_dim, p.max_action_dim, p.max_action_horizon) == (128, 128, 50) for p, _ in loaded.values())


@pytest.mark.parametrize("edit, match", [
    (lambda p, s: s["gr1"]["relative_action"]["left_arm"].update(min=[[0.0] * 7] * 15), "expected \\[16, 7\\]"),
    (lambda p, s: p["processor_kwargs"]["modality_configs"]["gr1"]["action"]["action_configs"][0].update(
        type="EEF", format="XYZ_ROT6D"), "only NON_EEF"),
    (lambda p, s: s["gr1"]["relative_action"].pop("right_hand"), "no relative_action statistics"),
    (lambda p, s: s.pop("gr1"), "no statistics for tag"),
    (lambda p, s: p["processor_kwargs"]["modality_configs"].pop("gr1"), "no modality config"),
    (lambda p, s: s["gr1"]["state"].pop("waist"), "malformed"),
])
def test_loader_refuses_what_it_cannot_serve(tmp_path, checkpoint, edit, match):
    ckpt = files_copy(tmp_path, checkpoint)
    proc = json.loads((ckpt / "processor_config.json").read_text())
    stats = json.loads((ckpt / "statistics.json").read_text())
    edit(proc, stats)
    (ckpt / "processor_config.json").write_text(json.dumps(proc))
    (ckpt / "statistics.json").write_text(json.dumps(stats))
    with pytest.raises(ConfigError, match=match):
        N16Processing.from_checkpoint(ckpt, "gr1")


def test_state_input_errors(loaded, raw):
    proc, stats = loaded["gr1"]
    state = state_for(raw, "gr1", np.random.default_rng(11))
    framed = {k: v[None] for k, v in state.items()}  # (1, D): the last frame is used
    np.testing.assert_array_equal(encode_state(framed, stats, proc), encode_state(state, stats, proc))
    with pytest.raises(KeyError):
        encode_state({k: v for k, v in state.items() if k != "waist"}, stats, proc)
    with pytest.raises(ValueError):
        encode_state({**state, "waist": np.zeros(4)}, stats, proc)
