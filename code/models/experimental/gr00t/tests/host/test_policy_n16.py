# SPDX-License-Identifier: Apache-2.0
"""The N1.6 reference policy (``reference/torch_policy_n16.py``) on the tiny synthetic N1.6 checkpoint: every served
tag answers finite actions of its groups and horizon, the noise rules (seed, explicit, their equivalence, the
envelope's shape), the stages compose exactly as the separately tested pieces do, and RTC's frozen prefix inverts the
decoding."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch
from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
from models.experimental.gr00t.common.configs_n16 import Gr00tN16Config, Gr00tN16ProcessorConfig
from models.experimental.gr00t.common.errors import ConfigError, InputError
from models.experimental.gr00t.common.flow_matching import seeded_noise
from models.experimental.gr00t.common.layouts import LAYOUTS, N16_LAYOUTS
from models.experimental.gr00t.common.normalization_n16 import N16Processing, decode_actions, encode_state
from models.experimental.gr00t.common.observation import Observation
from models.experimental.gr00t.common.preprocessing_n16 import N16ImageChain
from models.experimental.gr00t.common.prompts_n16 import n16_prompt_ids
from models.experimental.gr00t.common.policy import batch_key, stack_inputs
from models.experimental.gr00t.common.rtc import InpaintPrefix
from models.experimental.gr00t.reference.torch_backbone_n16 import Eagle3Backbone
from models.experimental.gr00t.reference.torch_gr00t_n16 import Gr00tN16ActionHead
from models.experimental.gr00t.reference.torch_policy_n16 import ReferencePolicyN16

from ..conftest import make_frame

TAGS = sorted(N16_LAYOUTS)
INSTRUCTION = "Pick the pear from the counter, and place it in the plate!"


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoints):
    return tiny_checkpoints["n16"]


@pytest.fixture(scope="module")
def policies(checkpoint):
    return {tag: ReferencePolicyN16.from_checkpoint(checkpoint, tag) for tag in TAGS}


def observation(tag: str, seed: int = 1, size=(256, 256)) -> Observation:
    lay = N16_LAYOUTS[tag]
    rng = np.random.default_rng(seed)
    return Observation(images={cam: [make_frame(seed + i, size)] for i, cam in enumerate(lay.cameras)},
                       state={k: rng.uniform(-1.2, 1.2, d) for k, d in lay.state_groups}, instruction=INSTRUCTION)


def test_layout_rows_are_served_and_match_the_tags():
    assert all(LAYOUTS[lay.name] is lay for lay in N16_LAYOUTS.values())  # served: GR00T_EMBODIMENT picks one
    gr1 = N16_LAYOUTS["gr1"]
    assert [k for k, _ in gr1.action_groups] == ["left_arm", "right_arm", "left_hand", "right_hand", "waist"]
    assert gr1.state_groups == gr1.action_groups and gr1.embodiment_id == 20 and gr1.wire.image_hw == (256, 256)
    assert len(gr1.cameras) == 1 and gr1.frames_per_camera == 1
    assert {lay.version for lay in N16_LAYOUTS.values()} == {"n16"}


@pytest.mark.parametrize("tag", TAGS)
def test_each_tag_answers_finite_actions_of_its_groups(policies, tag):
    policy, lay = policies[tag], N16_LAYOUTS[tag]
    result = policy.get_action(observation(tag), seed=5)
    horizon = policy.processing.horizon
    assert horizon == {"gr1": 16, "unitree_g1": 30, "oxe_widowx": 8}[tag]
    assert list(result.actions) == [k for k, _ in lay.action_groups]
    for key, dim in lay.action_groups:
        assert result.actions[key].shape == (horizon, dim) and result.actions[key].dtype == np.float32
        assert np.isfinite(result.actions[key]).all()
    assert result.action_pred.shape == (horizon, 128) and np.isfinite(result.action_pred).all()
    assert result.taps["action_pred"].shape == (1, 50, 128) and result.taps["noise"].shape == (1, 50, 128)
    np.testing.assert_array_equal(result.action_pred, result.taps["action_pred"][0, :horizon].numpy())
    assert result.noise_source == "seed" and result.seed == 5
    # one 256² frame → 252² → 81 image tokens; S = 104 + L (spec §4.3)
    assert result.seq_len == 104 + result.prompt_tokens and int(result.taps["image_mask"].sum()) == 81
    assert {"preprocess", "vision", "llm", "adapter", "dit_step_3", "postprocess"} <= set(result.timing_ms)


def test_a_fixed_seed_and_fixed_noise_repeat_and_a_seed_equals_its_noise(policies):
    policy, obs = policies["gr1"], observation("gr1")
    a, b = policy.get_action(obs, seed=7), policy.get_action(obs, seed=7)
    np.testing.assert_array_equal(a.action_pred, b.action_pred)
    noise = seeded_noise(7, 50, 128)[0].numpy()
    c = policy.get_action(obs, noise=noise.tolist())
    d = policy.get_action(obs, noise=noise)
    assert c.noise_source == "client" and c.seed is None
    for other in (c, d):
        np.testing.assert_array_equal(a.action_pred, other.action_pred)
        for k in a.actions:
            np.testing.assert_array_equal(a.actions[k], other.actions[k])
    default = policy.get_action(obs)  # no seed, no noise: the layout's default seed (0)
    np.testing.assert_array_equal(default.action_pred, policy.get_action(obs, seed=0).action_pred)
    assert not np.array_equal(default.action_pred, a.action_pred)


def test_noise_must_cover_the_envelope_and_not_come_with_a_seed(policies):
    policy, obs = policies["gr1"], observation("gr1")
    with pytest.raises(InputError):
        policy.prepare(obs, noise=np.zeros((16, 128)))  # the tag's horizon is not the envelope
    with pytest.raises(InputError):
        policy.prepare(obs, noise=np.zeros((50, 128)), seed=1)


def test_the_stages_compose_exactly_as_the_pieces(policies, checkpoint):
    """image chain → prompt → backbone → encode_state → head with the noise → decode, called by hand from the
    checkpoint's own files, equals the policy bit for bit."""
    tag = "gr1"
    obs = observation(tag, seed=4, size=(180, 320))  # a non-square frame: 252×448, 144 tokens
    result = policies[tag].get_action(obs, seed=11)

    config = Gr00tN16Config.from_checkpoint(checkpoint)
    processing, stats = N16Processing.from_checkpoint(checkpoint, tag)
    chain = N16ImageChain.from_configs(Gr00tN16ProcessorConfig.from_checkpoint(checkpoint), config.backbone)
    images = chain([obs.images[cam][0] for cam in N16_LAYOUTS[tag].cameras])
    assert [tuple(im.shape) for im in images] == [(3, 252, 448)]
    prompt = n16_prompt_ids(obs.instruction, [(im.shape[1] // 28) * (im.shape[2] // 28) for im in images])
    ids = torch.tensor([prompt.input_ids])
    ckpt = LazyCheckpoint(checkpoint)
    with torch.inference_mode():
        out = Eagle3Backbone.from_checkpoint(ckpt, config.backbone)(ids, images)
        state = torch.from_numpy(encode_state(obs.state, stats, processing)).reshape(1, 1, -1)
        head = Gr00tN16ActionHead.from_checkpoint(ckpt, config)
        chunk = head(out["backbone_features"], out["image_mask"], state, processing.embodiment_id,
                     seeded_noise(11, 50, 128))
    actions = decode_actions(chunk[0].numpy(), obs.state, stats, processing)

    assert processing.embodiment_id == 20 and result.seq_len == len(prompt.input_ids)
    torch.testing.assert_close(result.taps["backbone_features"], out["backbone_features"], rtol=0, atol=0)
    torch.testing.assert_close(result.taps["action_pred"], chunk, rtol=0, atol=0)
    np.testing.assert_array_equal(result.action_pred, chunk[0, :16].numpy())
    assert list(result.actions) == list(actions)
    for k, v in actions.items():
        np.testing.assert_array_equal(result.actions[k], v)


@pytest.mark.parametrize("tag", TAGS)
def test_rtc_frozen_prefix_gives_the_model_rows_back(policies, tag):
    """decode → frozen_prefix (same request) = the model-space rows, within float32, wherever decoding did not clip;
    the padding columns are the previous rows' own."""
    policy, obs = policies[tag], observation(tag, seed=2)
    inputs = policy.prepare(obs, seed=3)
    result = policy.get_action(obs, seed=3)
    steps = slice(0, 6)
    rows = policy.frozen_prefix(result.action_pred, result.actions, steps, inputs)
    assert rows.shape == (6, 128) and rows.dtype == np.float32
    width = policy.processing.action_width
    np.testing.assert_array_equal(rows[:, width:], result.action_pred[steps, width:])
    want = result.action_pred[steps, :width]
    mean_std = np.zeros(width, bool)
    for key in policy.processing.action_keys:
        mean_std[key.start:key.start + key.dim] = key.mean_std
    unclipped = (np.abs(want) <= 1.0) | mean_std
    assert unclipped.mean() > 0.2  # the comparison is not vacuous
    np.testing.assert_allclose(rows[:, :width][unclipped], want[unclipped], rtol=1e-5, atol=2e-5)
    assert (np.abs(rows[:, :width][~unclipped]) <= 1.0 + 1e-6).all()  # clipped rows come back clipped
    # the rows feed the inpainting sampler over the 50-row envelope: the new chunk starts with them
    inputs.inpaint = InpaintPrefix.build(rows, int(inputs.noise.shape[1]))
    taps = policy.infer(inputs)
    np.testing.assert_allclose(taps["action_pred"][0, :6].numpy(), rows, atol=1e-5)


def test_a_checkpoint_that_disagrees_with_the_layout_is_refused(checkpoint, tmp_path):
    copy = shutil.copytree(checkpoint, tmp_path / "ckpt")
    path = copy / "processor_config.json"
    proc = json.loads(path.read_text())
    proc["processor_kwargs"]["modality_configs"]["gr1"]["video"]["modality_keys"] = ["ego_view"]
    path.write_text(json.dumps(proc))
    with pytest.raises(ConfigError, match="disagrees with layout 'gr1_n16' on cameras"):
        ReferencePolicyN16.from_checkpoint(copy, "gr1")
    with pytest.raises(ConfigError, match="no layout"):
        ReferencePolicyN16.from_checkpoint(checkpoint, "libero_panda")


def test_the_category_row_is_the_files(checkpoint, tmp_path):
    copy = shutil.copytree(checkpoint, tmp_path / "ckpt")
    ids = json.loads((copy / "embodiment_id.json").read_text())
    (copy / "embodiment_id.json").write_text(json.dumps({**ids, "gr1": 5}))
    policy = ReferencePolicyN16.from_checkpoint(copy, layout="gr1_n16")
    assert policy.layout == dataclasses.replace(N16_LAYOUTS["gr1"], embodiment_id=5)
    assert policy.cat_ids.tolist() == [5]
    # the base's six-argument constructor (how torch_fast.build re-wraps a moved model) reads the rest back
    again = type(policy)(policy.model, policy.config, policy.layout, policy.stats, policy.checkpoint_dir,
                         policy.synthetic)
    assert again.processing == policy.processing and again.processor == policy.processor


def test_bad_requests_are_refused_before_the_model(policies):
    policy, obs = policies["gr1"], observation("gr1")
    with pytest.raises(InputError, match="state"):
        policy.prepare(dataclasses.replace(obs, state={**obs.state, "waist": np.zeros(2)}))
    with pytest.raises(InputError, match="state"):
        policy.prepare(dataclasses.replace(obs, state={k: v for k, v in obs.state.items() if k != "waist"}))
    with pytest.raises(InputError, match="images"):
        policy.prepare(dataclasses.replace(obs, images={"ego_view": obs.images[N16_LAYOUTS["gr1"].cameras[0]]}))
    with pytest.raises(InputError, match="instruction"):
        policy.prepare(dataclasses.replace(obs, instruction="?!"))


def test_stacked_requests_compute_what_each_computes_alone(policies):
    """The server's micro-batching: two prepared requests of one ``batch_key`` (their images concatenated in request
    order, which is the backbone's splice order) give each row its own answer, up to the GEMMs' summation order."""
    policy = policies["gr1"]
    a = policy.prepare(observation("gr1", seed=1), seed=1)
    b = policy.prepare(observation("gr1", seed=2), seed=2)
    assert batch_key(a) == batch_key(b)
    both = policy.infer(stack_inputs([a, b]))["action_pred"]
    for row, alone in enumerate((a, b)):
        torch.testing.assert_close(both[row], policy.infer(alone)["action_pred"][0], rtol=1e-4, atol=1e-4)
