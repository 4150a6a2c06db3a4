# SPDX-License-Identifier: Apache-2.0
"""The reference policies end to end on the tiny checkpoints. Every version (N1.6 as its default tag, GR1): the
documented tap and action shapes, Euler integration as noise plus a quarter of each velocity, bit-identical repeats,
and default noise equal to the same noise sent by a client. N1.5: the backbone equals transformers' modules chained,
and bad noise or observations are refused naming the field. N1.7: the DROID prompt has upstream's exact token layout;
the state tap and the actions follow statistics.json, frames reach the model time-major, output rotations are
proper, and refusals name the field."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.layouts import DROID, GR1, get_layout
from models.experimental.gr00t.common.normalization_n17 import decode_actions
from models.experimental.gr00t.common.observation import parse_observation
from models.experimental.gr00t.common.preprocessing import encode_png
from models.experimental.gr00t.common.prompts import bpe_files_dir, encode_n17_prompt
from models.experimental.gr00t.common.quality import FP32_REFERENCE_ATOL, max_abs_diff
from models.experimental.gr00t.common.versions import SPECS, VERSIONS
from models.experimental.gr00t.common.weights import LLM_PREFIX, MLP1_PREFIX, VISION_PREFIX
from transformers import Qwen3Config as HFQwen3Config
from transformers import Qwen3Model as HFQwen3Model
from transformers import SiglipVisionConfig
from transformers import SiglipVisionModel as HFSiglipVisionModel

from ..conftest import make_frame

TAG = "oxe_droid_relative_eef_relative_joint"
EXT, WRIST = "exterior_image_1_left", "wrist_image_left"
DEMO = "Put the blue block in the green bowl"
IM_START, USER, NL, VISION_START, IMAGE_PAD, VISION_END, IM_END = 151644, 872, 198, 151652, 151655, 151653, 151645


def rot_z(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def n16_gr1_request(gr1_request) -> dict:
    """N1.5's GR1 test request as N1.6 GR1 takes it: the frame under N1.6's camera name, and a waist."""
    rng = np.random.default_rng(2)
    return {**gr1_request, "images": {"ego_view_bg_crop_pad_res256_freq20": gr1_request["images"]["ego_view"]},
            "state": {**gr1_request["state"], "waist": [rng.uniform(-0.5, 0.5, 3).tolist()]}}


def droid_request(frames: dict[str, list[np.ndarray]] | None = None, instruction: str = DEMO) -> dict:
    frames = frames or {EXT: [make_frame(0, (180, 320)), make_frame(1, (180, 320))],
                        WRIST: [make_frame(2, (180, 320)), make_frame(3, (180, 320))]}
    r = rot_z(0.3) @ np.array([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])  # DROID's frame change C
    return {"images": {cam: [encode_png(f) for f in fs] for cam, fs in frames.items()},
            "state": {"eef_9d": [[0.45, -0.1, 0.3, *r[0], *r[1]]], "gripper_position": [[0.25]],
                      "joint_position": [[0.1, -0.4, 0.2, -2.1, 0.05, 1.9, 0.7]]},
            "instruction": instruction}


# ---- both versions ----------------------------------------------------------------------------------
@pytest.fixture
def observation(version, gr1_request):
    """The version's test observation: the GR1 request (one 256×256 frame), the DROID request (two 180×320
    frames from each of two cameras); both with the published demo instruction."""
    requests = {"n15": lambda: gr1_request, "n16": lambda: n16_gr1_request(gr1_request), "n17": droid_request}
    return parse_observation(requests[version](), get_layout(SPECS[version].layout))


TAP_SHAPES = {
    "n15": {"pixel_values": (1, 3, 224, 224), "input_ids": (1, 296), "vision_features": (1, 256, 64),
            "backbone_features": (1, 296, 64), "vl_embs": (1, 296, 64), "state": (1, 1, 64), "noise": (1, 16, 32),
            **{f"velocity_{i}": (1, 16, 32) for i in range(4)}, "action_pred": (1, 16, 32)},
    "n16": {"pixel_values": (1, 3, 252, 252), "input_ids": (1, 116), "image_tokens": (81, 64),  # 18² patches / 2²
            "backbone_features": (1, 116, 64), "state": (1, 1, 128), "noise": (1, 50, 128),
            **{f"velocity_{i}": (1, 50, 128) for i in range(4)}, "action_pred": (1, 50, 128)},
    "n17": {"pixel_values": (4 * 448, 1536),  # 4 frames × 16 × 28 patches of 3·2·16·16
            "input_ids": (1, 469), "state": (1, 1, 132), "noise": (1, 40, 132),
            **{f"velocity_{i}": (1, 40, 132) for i in range(4)}, "action_pred": (1, 40, 132)},
}
LENGTHS = {"n15": (296, 14), "n16": (116, 12), "n17": (469, 8)}  # (seq_len, prompt_tokens)
CHUNK = {"n15": (16, 32), "n16": (16, 128), "n17": (40, 132)}  # action_pred: horizon × the model's action dim
NOISE = {**CHUNK, "n16": (50, 128)}  # N1.6's noise covers the 50-step envelope; the tag's 16 rows are returned
ACTION_SHAPES = {"n15": {"left_arm": (16, 7), "right_arm": (16, 7), "left_hand": (16, 6), "right_hand": (16, 6)},
                 "n16": {"left_arm": (16, 7), "right_arm": (16, 7), "left_hand": (16, 6), "right_hand": (16, 6),
                         "waist": (16, 3)},
                 "n17": {"eef_9d": (40, 9), "gripper_position": (40, 1), "joint_position": (40, 7)}}


@pytest.mark.parametrize("version", VERSIONS)
def test_taps_and_outputs_have_the_documented_shapes(tiny_policies, observation, version):
    r = tiny_policies[version].get_action(observation)
    assert {k: tuple(r.taps[k].shape) for k in TAP_SHAPES[version]} == TAP_SHAPES[version]
    assert (r.seq_len, r.prompt_tokens) == LENGTHS[version]
    assert r.action_pred.shape == CHUNK[version]
    assert {k: v.shape for k, v in r.actions.items()} == ACTION_SHAPES[version]


EULER_SEED = {"n15": 3, "n16": 5, "n17": None}  # None: the version's default
EULER_ATOL = {"n15": 0.0, "n16": 0.0, "n17": 1e-6}  # N1.5 bit for bit


@pytest.mark.parametrize("version", VERSIONS)
def test_euler_integration_is_noise_plus_quarter_velocities(tiny_policies, observation, version):
    r = tiny_policies[version].get_action(observation, seed=EULER_SEED[version])
    x = r.taps["noise"]
    for i in range(4):
        x = x + 0.25 * r.taps[f"velocity_{i}"]
    torch.testing.assert_close(x, r.taps["action_pred"], rtol=0, atol=EULER_ATOL[version])
    for i in (1, 3):  # the timestep bucket changes the DiT's answer
        assert not torch.equal(r.taps["velocity_0"], r.taps[f"velocity_{i}"]), i


# (the repeated seed, None: the default; another seed)
REPEAT_SEEDS = {"n15": (7, 8), "n16": (None, 3), "n17": (None, 7)}


@pytest.mark.parametrize("version", VERSIONS)
def test_same_seed_gives_bit_identical_actions_and_another_seed_does_not(tiny_policies, observation, version):
    policy, (seed, other_seed) = tiny_policies[version], REPEAT_SEEDS[version]
    first, again = policy.get_action(observation, seed=seed), policy.get_action(observation, seed=seed)
    assert np.array_equal(again.action_pred, first.action_pred)
    assert all(np.array_equal(again.actions[k], first.actions[k]) for k in first.actions)
    other = policy.get_action(observation, seed=other_seed)
    assert other.seed == other_seed and not np.array_equal(other.action_pred, first.action_pred)


DEFAULT_SEED = {"n15": 0, "n16": 0, "n17": 42}
# The same noise as a client sends it: N1.5 / N1.6 a JSON list ([16, 32] / [50, 128]), N1.7 an array [1, 40, 132].
AS_CLIENT_NOISE = {"n15": lambda noise: noise[0].tolist(), "n16": lambda noise: noise[0].tolist(),
                   "n17": lambda noise: noise.numpy()}


@pytest.mark.parametrize("version", VERSIONS)
def test_default_noise_is_the_version_s_seed_and_equals_the_same_client_noise(tiny_policies, observation, version):
    policy, seed = tiny_policies[version], DEFAULT_SEED[version]
    default = policy.get_action(observation)
    assert (default.noise_source, default.seed) == ("seed", seed)
    noise = torch.randn((1, *NOISE[version]), generator=torch.Generator().manual_seed(seed))
    assert torch.equal(default.taps["noise"], noise)
    explicit = policy.get_action(observation, noise=AS_CLIENT_NOISE[version](noise))
    assert (explicit.noise_source, explicit.seed) == ("client", None)
    assert np.array_equal(explicit.action_pred, default.action_pred)
    assert all(np.array_equal(explicit.actions[k], default.actions[k]) for k in default.actions)


# ---- N1.5 -------------------------------------------------------------------------------------------
def test_backbone_equals_transformers_siglip_linear_qwen3_chain(tiny_policy, gr1_request):
    """SigLIP and Qwen3 from transformers, loaded from the same checkpoint tensors; the image tokens
    replace the <IMG_CONTEXT> embeddings in order."""
    c = tiny_policy.config.backbone
    state = {k: v.float() for k, v in tiny_policy.model.state_dict().items()}
    vis_cfg = SiglipVisionConfig(**{k: v for k, v in c.vision.to_hf_dict().items() if k != "model_type"})
    siglip = HFSiglipVisionModel(vis_cfg).eval()
    siglip.load_state_dict(_strip(state, VISION_PREFIX), strict=True)  # transformers 5: no inner vision_model level
    txt = {k: v for k, v in c.text.to_hf_dict().items() if k not in ("model_type", "architectures")}
    qwen = HFQwen3Model(HFQwen3Config(**{**txt, "num_hidden_layers": c.select_layer})).eval()
    qwen.load_state_dict(_strip(state, LLM_PREFIX), strict=True)
    proj = torch.nn.Linear(c.vision.hidden_size, c.text.hidden_size)
    proj.load_state_dict(_strip(state, MLP1_PREFIX + "0."))

    obs = parse_observation(gr1_request, GR1)
    result = tiny_policy.get_action(obs)
    ids, pixels = result.taps["input_ids"], result.taps["pixel_values"]
    with torch.no_grad():
        embeds = qwen.embed_tokens(ids).clone()
        embeds[ids == 151669] = proj(siglip(pixel_values=pixels).last_hidden_state).reshape(-1, c.text.hidden_size)
        expected = qwen(inputs_embeds=embeds).last_hidden_state
    assert max_abs_diff(result.taps["backbone_features"], expected) < FP32_REFERENCE_ATOL


def _strip(state: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


@pytest.mark.parametrize("noise, rule", [([[0.0] * 32] * 15, r"shape \[15, 32\]"),
                                          ([[float("nan")] * 32] * 16, "not finite")], ids=["shape", "nan"])
def test_bad_noise_is_refused(tiny_policy, gr1_request, noise, rule):
    with pytest.raises(InputError, match=rule):
        tiny_policy.get_action(parse_observation(gr1_request, GR1), noise=noise)


@pytest.mark.parametrize(
    "mutate, field",
    [(lambda r: r["state"].pop("left_hand"), "state.left_hand"),
     (lambda r: r["state"].update(waist=[[0.0]]), "state.waist"),
     (lambda r: r["state"].update(left_arm=[[0.0] * 6]), "state.left_arm"),
     (lambda r: r["state"].update(right_arm=[[float("inf")] * 7]), "state.right_arm"),
     (lambda r: r["images"].update(wrist=r["images"]["ego_view"]), "images.wrist"),
     (lambda r: r.pop("instruction"), "instruction")],
    ids=["missing_group", "unknown_group", "wrong_length", "non_finite", "unknown_camera", "no_instruction"],
)
def test_malformed_observations_name_the_field(gr1_request, mutate, field):
    mutate(gr1_request)
    with pytest.raises(InputError) as err:
        parse_observation(gr1_request, GR1)
    assert err.value.field == field


# ---- N1.7: prompt --------------------------------------------------------------------------------------
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


# ---- N1.7: policy --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo(tiny_policy_n17):
    obs = parse_observation(droid_request(), DROID)
    return obs, tiny_policy_n17.get_action(obs)


def test_policy_prompt_ids_are_the_demo_layout(demo, vocab):
    _, r = demo
    assert r.taps["input_ids"][0].tolist() == droid_prompt(word_ids(vocab, "put the blue block in the green bowl"))


def test_state_tap_is_q01_q99_normalised_from_statistics_json(demo, tiny_checkpoint_n17):
    obs, r = demo
    stats = json.loads((tiny_checkpoint_n17 / "statistics.json").read_text())[TAG]["state"]
    parts = []
    for key in ("eef_9d", "gripper_position", "joint_position"):
        q01, q99 = np.array(stats[key]["q01"]), np.array(stats[key]["q99"])
        parts.append(np.clip(2 * (obs.state[key] - q01) / (q99 - q01) - 1, -1, 1))
    expected = np.concatenate(parts + [np.zeros(132 - 17)]).astype(np.float32)
    np.testing.assert_allclose(r.taps["state"].numpy().reshape(132), expected, rtol=0, atol=1e-7)


def test_actions_equal_the_decoded_action_pred(tiny_policy_n17, demo, tiny_checkpoint_n17):
    obs, r = demo
    decoded = decode_actions(r.action_pred, obs.state, tiny_policy_n17.stats, DROID)
    assert all(np.array_equal(decoded[k], r.actions[k]) for k in r.actions)
    # and, independently of the decoder, upstream's joint and gripper formulas hold
    s = json.loads((tiny_checkpoint_n17 / "statistics.json").read_text())[TAG]
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


def test_frames_reach_the_model_time_major_then_camera(tiny_policy_n17):
    """Constant frames survive every resize unchanged, so each frame's 448 patch rows identify it:
    the order must be ext(t−15), wrist(t−15), ext(t), wrist(t) (upstream's time-major order)."""
    values = {(EXT, 0): 10, (WRIST, 0): 80, (EXT, 1): 150, (WRIST, 1): 220}
    frames = {cam: [np.full((180, 320, 3), values[cam, t], np.uint8) for t in range(2)] for cam in (EXT, WRIST)}
    r = tiny_policy_n17.get_action(parse_observation(droid_request(frames), DROID))
    blocks = r.taps["pixel_values"].reshape(4, 448 * 1536)
    for i, key in enumerate([(EXT, 0), (WRIST, 0), (EXT, 1), (WRIST, 1)]):
        assert torch.all(blocks[i] == (values[key] - 127.5) / 127.5), key


def test_swapping_the_t_minus_15_and_t_frames_changes_the_actions(tiny_policy_n17, demo):
    _, r = demo
    swapped = {EXT: [make_frame(1, (180, 320)), make_frame(0, (180, 320))],
               WRIST: [make_frame(3, (180, 320)), make_frame(2, (180, 320))]}
    other = tiny_policy_n17.get_action(parse_observation(droid_request(swapped), DROID))
    assert np.abs(other.action_pred - r.action_pred).max() > 1e-3


@pytest.mark.parametrize("cam, index", [(EXT, 0), (WRIST, 1)])
def test_a_square_frame_is_refused_naming_the_camera_and_frame(tiny_policy_n17, cam, index):
    frames = {c: [make_frame(0, (180, 320)), make_frame(1, (180, 320))] for c in (EXT, WRIST)}
    frames[cam][index] = make_frame(5, (256, 256))  # aspect 1.0 would give 64 tokens, not 112
    with pytest.raises(InputError) as err:
        tiny_policy_n17.get_action(parse_observation(droid_request(frames), DROID))
    assert err.value.field == f"images.{cam}[{index}]"


@pytest.mark.parametrize("rot6d", [[0.0] * 6, [1.0, 0.0, 0.0, 2.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]],
                         ids=["zeros", "parallel_rows", "zero_second_row"])
def test_a_degenerate_eef_rotation_is_refused(tiny_policy_n17, rot6d):
    req = droid_request()
    req["state"]["eef_9d"] = [[0.45, -0.1, 0.3, *rot6d]]
    with pytest.raises(InputError) as err:
        tiny_policy_n17.get_action(parse_observation(req, DROID))
    assert err.value.field == "state.eef_9d"


def test_an_instruction_over_51_tokens_is_refused_by_the_policy(tiny_policy_n17):
    with pytest.raises(InputError, match="52 tokens") as err:
        tiny_policy_n17.get_action(parse_observation(droid_request(instruction="a" + " a" * 51), DROID))
    assert err.value.field == "instruction"


def test_noise_and_seed_together_are_refused(tiny_policy_n17, demo):
    obs, _ = demo
    with pytest.raises(InputError) as err:
        tiny_policy_n17.get_action(obs, noise=np.zeros((40, 132)), seed=1)
    assert err.value.field == "noise"
