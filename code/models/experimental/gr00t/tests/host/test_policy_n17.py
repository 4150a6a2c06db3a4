# SPDX-License-Identifier: Apache-2.0
"""The N1.7 DROID prompt has upstream's exact token layout, and the reference policy on the tiny
checkpoint keeps its contract: tap shapes, seed 42 noise equal to explicit client noise, bit-identical
repeats, time-major frame order, proper output rotations, and refusals that name the field."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.layouts import DROID
from models.experimental.gr00t.common.normalization_n17 import decode_actions
from models.experimental.gr00t.common.observation import parse_observation
from models.experimental.gr00t.common.preprocessing import encode_png
from models.experimental.gr00t.common.prompts import bpe_files_dir, encode_n17_prompt

from ..conftest import make_frame

TAG = "oxe_droid_relative_eef_relative_joint"
EXT, WRIST = "exterior_image_1_left", "wrist_image_left"
DEMO = "Put the blue block in the green bowl"
IM_START, USER, NL, VISION_START, IMAGE_PAD, VISION_END, IM_END = 151644, 872, 198, 151652, 151655, 151653, 151645


@pytest.fixture(scope="session")
def vocab() -> dict[str, int]:
    """Qwen's BPE vocabulary file, read directly (not through the tokenizer under test)."""
    return json.loads((bpe_files_dir() / "vocab.json").read_text())


def word_ids(vocab: dict[str, int], text: str) -> list[int]:
    """Ids of a text whose every word is one BPE token: the first bare, the rest with the 'Ġ' space."""
    words = text.split(" ")
    return [vocab[words[0]]] + [vocab["Ġ" + w] for w in words[1:]]


def droid_prompt(text_ids: list[int], tokens_per_image: int = 112) -> list[int]:
    image = [VISION_START] + [IMAGE_PAD] * tokens_per_image + [VISION_END]
    return [IM_START, USER, NL] + image * 4 + text_ids + [IM_END, NL]


def encode(text: str):
    return encode_n17_prompt(text, tokens_per_image=[112] * 4, max_text_tokens=51)


# ---- prompt -----------------------------------------------------------------------------------------
def test_published_demo_instruction_gives_469_tokens_in_the_spec_layout(vocab):
    p = encode(DEMO)
    expected = droid_prompt(word_ids(vocab, "put the blue block in the green bowl"))
    assert p.input_ids == expected
    assert (len(p.input_ids), p.text_tokens) == (469, 8)  # S = 461 + text tokens


def test_formalisation_lower_cases_and_drops_punctuation():
    assert encode("Pick-up the CUP!").input_ids == encode("pickup the cup").input_ids
    assert encode("Put the cup, please.").input_ids == encode("put the cup please").input_ids
    assert encode("move_the cup").input_ids != encode("movethe cup").input_ids  # "_" is a word character


def test_51_text_tokens_are_accepted_and_52_refused(vocab):
    assert word_ids(vocab, "a" + " a" * 50) == [vocab["a"]] + [vocab["Ġa"]] * 50  # one token per word
    p = encode("a" + " a" * 50)
    assert (p.text_tokens, len(p.input_ids)) == (51, 512)
    with pytest.raises(InputError, match="52 tokens.*limit is 51") as err:
        encode("a" + " a" * 51)
    assert err.value.field == "instruction"


@pytest.mark.parametrize("text", ["?!...", "", "  \t ", "--- ,;"],
                         ids=["punctuation", "empty", "whitespace", "dashes_and_commas"])
def test_instructions_empty_after_formalisation_are_refused(text):
    with pytest.raises(InputError, match="empty") as err:
        encode(text)
    assert err.value.field == "instruction"


# ---- policy fixtures --------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def n17_tiny_checkpoint(tmp_path_factory):
    from models.experimental.gr00t.common.synthetic import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "n17-tiny", scale="tiny", seed=0, version="n17",
                            log=lambda _: None)


@pytest.fixture(scope="session")
def n17_policy(n17_tiny_checkpoint):
    from models.experimental.gr00t.reference.torch_policy_n17 import ReferencePolicyN17

    return ReferencePolicyN17.from_checkpoint(n17_tiny_checkpoint)


def rot_z(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def droid_request(frames: dict[str, list[np.ndarray]] | None = None, instruction: str = DEMO) -> dict:
    frames = frames or {EXT: [make_frame(0, (180, 320)), make_frame(1, (180, 320))],
                        WRIST: [make_frame(2, (180, 320)), make_frame(3, (180, 320))]}
    r = rot_z(0.3) @ np.array([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])  # DROID's frame change C
    return {"images": {cam: [encode_png(f) for f in fs] for cam, fs in frames.items()},
            "state": {"eef_9d": [[0.45, -0.1, 0.3, *r[0], *r[1]]], "gripper_position": [[0.25]],
                      "joint_position": [[0.1, -0.4, 0.2, -2.1, 0.05, 1.9, 0.7]]},
            "instruction": instruction}


@pytest.fixture(scope="module")
def demo(n17_policy):
    obs = parse_observation(droid_request(), DROID)
    return obs, n17_policy.get_action(obs)


# ---- policy -----------------------------------------------------------------------------------------
def test_taps_and_outputs_have_the_documented_shapes(demo):
    _, r = demo
    shapes = {k: tuple(v.shape) for k, v in r.taps.items()}
    assert shapes["pixel_values"] == (4 * 448, 1536)  # 4 frames × 16 × 28 patches of 3·2·16·16
    assert shapes["input_ids"] == (1, 469) and (r.seq_len, r.prompt_tokens) == (469, 8)
    assert shapes["state"] == (1, 1, 132) and shapes["noise"] == (1, 40, 132)
    assert [shapes[f"velocity_{i}"] for i in range(4)] == [(1, 40, 132)] * 4
    assert shapes["action_pred"] == (1, 40, 132) and r.action_pred.shape == (40, 132)
    assert {k: v.shape for k, v in r.actions.items()} == {"eef_9d": (40, 9), "gripper_position": (40, 1),
                                                           "joint_position": (40, 7)}


def test_policy_prompt_ids_are_the_demo_layout(demo, vocab):
    _, r = demo
    assert r.taps["input_ids"][0].tolist() == droid_prompt(word_ids(vocab, "put the blue block in the green bowl"))


def test_state_tap_is_q01_q99_normalised_from_statistics_json(demo, n17_tiny_checkpoint):
    obs, r = demo
    stats = json.loads((n17_tiny_checkpoint / "statistics.json").read_text())[TAG]["state"]
    parts = []
    for key in ("eef_9d", "gripper_position", "joint_position"):
        q01, q99 = np.array(stats[key]["q01"]), np.array(stats[key]["q99"])
        parts.append(np.clip(2 * (obs.state[key] - q01) / (q99 - q01) - 1, -1, 1))
    expected = np.concatenate(parts + [np.zeros(132 - 17)]).astype(np.float32)
    np.testing.assert_allclose(r.taps["state"].numpy().reshape(132), expected, rtol=0, atol=1e-7)


def test_euler_integration_is_noise_plus_quarter_velocities(demo):
    _, r = demo
    x = r.taps["noise"]
    for i in range(4):
        x = x + 0.25 * r.taps[f"velocity_{i}"]
    torch.testing.assert_close(x, r.taps["action_pred"], rtol=0, atol=1e-6)
    assert not torch.equal(r.taps["velocity_0"], r.taps["velocity_3"])


def test_default_noise_is_seed_42_and_equals_the_same_client_noise(n17_policy, demo):
    obs, default = demo
    assert (default.noise_source, default.seed) == ("seed", 42)
    noise = torch.randn((1, 40, 132), generator=torch.Generator().manual_seed(42))
    assert torch.equal(default.taps["noise"], noise)
    explicit = n17_policy.get_action(obs, noise=noise.numpy())
    assert (explicit.noise_source, explicit.seed) == ("client", None)
    assert np.array_equal(explicit.action_pred, default.action_pred)
    assert all(np.array_equal(explicit.actions[k], default.actions[k]) for k in default.actions)


def test_same_inputs_give_bit_identical_actions_and_another_seed_does_not(n17_policy, demo):
    obs, first = demo
    again = n17_policy.get_action(obs)
    assert np.array_equal(again.action_pred, first.action_pred)
    assert all(np.array_equal(again.actions[k], first.actions[k]) for k in first.actions)
    other = n17_policy.get_action(obs, seed=7)
    assert other.seed == 7 and not np.array_equal(other.action_pred, first.action_pred)


def test_actions_equal_the_decoded_action_pred(n17_policy, demo, n17_tiny_checkpoint):
    obs, r = demo
    decoded = decode_actions(r.action_pred, obs.state, n17_policy.stats, DROID)
    assert all(np.array_equal(decoded[k], r.actions[k]) for k in r.actions)
    # and, independently of the decoder, upstream's joint and gripper formulas hold
    s = json.loads((n17_tiny_checkpoint / "statistics.json").read_text())[TAG]
    y = np.clip(r.action_pred.astype(np.float64), -1, 1)
    lo, hi = (np.array(s["relative_action"]["joint_position"]["min"]),
              np.array(s["relative_action"]["joint_position"]["max"]))
    joints = obs.state["joint_position"] + (y[:, 10:17] + 1) / 2 * (hi - lo) + lo
    np.testing.assert_allclose(r.actions["joint_position"], joints, rtol=1e-6, atol=1e-6)
    g = s["action"]["gripper_position"]
    gripper = (y[:, 9:10] + 1) / 2 * (np.array(g["q99"]) - np.array(g["q01"])) + np.array(g["q01"])
    np.testing.assert_allclose(r.actions["gripper_position"], gripper, rtol=1e-6, atol=1e-6)
    assert (np.abs(r.action_pred[:, :17]) > 1).any()  # random weights: the clip is exercised


def test_output_eef_rotations_are_the_first_two_rows_of_a_rotation(demo):
    _, r = demo
    rows = r.actions["eef_9d"][:, 3:9].astype(np.float64).reshape(40, 2, 3)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.sum(rows[:, 0] * rows[:, 1], axis=-1), 0.0, atol=1e-6)
    assert np.isfinite(r.actions["eef_9d"]).all()


def test_frames_reach_the_model_time_major_then_camera(n17_policy):
    """Constant frames survive every resize unchanged, so each frame's 448 patch rows identify it:
    the order must be ext(t−15), wrist(t−15), ext(t), wrist(t) (upstream's time-major order)."""
    values = {(EXT, 0): 10, (WRIST, 0): 80, (EXT, 1): 150, (WRIST, 1): 220}
    frames = {cam: [np.full((180, 320, 3), values[cam, t], np.uint8) for t in range(2)] for cam in (EXT, WRIST)}
    r = n17_policy.get_action(parse_observation(droid_request(frames), DROID))
    blocks = r.taps["pixel_values"].reshape(4, 448 * 1536)
    for i, key in enumerate([(EXT, 0), (WRIST, 0), (EXT, 1), (WRIST, 1)]):
        assert torch.all(blocks[i] == (values[key] - 127.5) / 127.5), key


def test_swapping_the_t_minus_15_and_t_frames_changes_the_actions(n17_policy, demo):
    _, r = demo
    swapped = {EXT: [make_frame(1, (180, 320)), make_frame(0, (180, 320))],
               WRIST: [make_frame(3, (180, 320)), make_frame(2, (180, 320))]}
    other = n17_policy.get_action(parse_observation(droid_request(swapped), DROID))
    assert np.abs(other.action_pred - r.action_pred).max() > 1e-3


@pytest.mark.parametrize("cam, index", [(EXT, 0), (WRIST, 1)])
def test_a_square_frame_is_refused_naming_the_camera_and_frame(n17_policy, cam, index):
    frames = {c: [make_frame(0, (180, 320)), make_frame(1, (180, 320))] for c in (EXT, WRIST)}
    frames[cam][index] = make_frame(5, (256, 256))  # aspect 1.0 would give 64 tokens, not 112
    with pytest.raises(InputError) as err:
        n17_policy.get_action(parse_observation(droid_request(frames), DROID))
    assert err.value.field == f"images.{cam}[{index}]"


@pytest.mark.parametrize("rot6d", [[0.0] * 6, [1.0, 0.0, 0.0, 2.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]],
                         ids=["zeros", "parallel_rows", "zero_second_row"])
def test_a_degenerate_eef_rotation_is_refused(n17_policy, rot6d):
    req = droid_request()
    req["state"]["eef_9d"] = [[0.45, -0.1, 0.3, *rot6d]]
    with pytest.raises(InputError) as err:
        n17_policy.get_action(parse_observation(req, DROID))
    assert err.value.field == "state.eef_9d"


def test_an_instruction_over_51_tokens_is_refused_by_the_policy(n17_policy):
    with pytest.raises(InputError, match="52 tokens") as err:
        n17_policy.get_action(parse_observation(droid_request(instruction="a" + " a" * 51), DROID))
    assert err.value.field == "instruction"


def test_noise_and_seed_together_are_refused(n17_policy, demo):
    obs, _ = demo
    with pytest.raises(InputError) as err:
        n17_policy.get_action(obs, noise=np.zeros((40, 132)), seed=1)
    assert err.value.field == "noise"
