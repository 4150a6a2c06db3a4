# SPDX-License-Identifier: Apache-2.0
"""The reference policy end to end on the tiny checkpoint: the backbone equals transformers' modules
chained, noise handling is exact, and the same inputs give bit-identical actions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.layouts import GR1
from models.experimental.gr00t.common.observation import parse_observation
from models.experimental.gr00t.common.quality import FP32_REFERENCE_ATOL, max_abs_diff
from models.experimental.gr00t.common.weights import LLM_PREFIX, MLP1_PREFIX, VISION_PREFIX
from transformers import Qwen3Config as HFQwen3Config
from transformers import Qwen3Model as HFQwen3Model
from transformers import SiglipVisionConfig
from transformers import SiglipVisionModel as HFSiglipVisionModel


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


def test_taps_have_the_documented_shapes(tiny_policy, gr1_request):
    r = tiny_policy.get_action(parse_observation(gr1_request, GR1))
    shapes = {k: tuple(v.shape) for k, v in r.taps.items()}
    assert shapes["pixel_values"] == (1, 3, 224, 224)
    assert shapes["input_ids"] == (1, 296) and (r.seq_len, r.prompt_tokens) == (296, 14)
    assert shapes["vision_features"] == (1, 256, 64) and shapes["backbone_features"] == (1, 296, 64)
    assert shapes["vl_embs"] == (1, 296, 64) and shapes["state"] == (1, 1, 64)
    assert [shapes[f"velocity_{i}"] for i in range(4)] == [(1, 16, 32)] * 4
    assert {k: v.shape for k, v in r.actions.items()} == {"left_arm": (16, 7), "right_arm": (16, 7),
                                                           "left_hand": (16, 6), "right_hand": (16, 6)}


def test_euler_integration_is_noise_plus_quarter_velocities(tiny_policy, gr1_request):
    r = tiny_policy.get_action(parse_observation(gr1_request, GR1), seed=3)
    x = r.taps["noise"]
    for i in range(4):
        x = x + 0.25 * r.taps[f"velocity_{i}"]
    assert torch.equal(x, r.taps["action_pred"])
    assert not torch.equal(r.taps["velocity_0"], r.taps["velocity_1"])  # the bucket changes the DiT's answer


def test_same_seed_gives_bit_identical_actions(tiny_policy, gr1_request):
    obs = parse_observation(gr1_request, GR1)
    a, b = tiny_policy.get_action(obs, seed=7), tiny_policy.get_action(obs, seed=7)
    assert all(np.array_equal(a.actions[k], b.actions[k]) for k in a.actions)
    c = tiny_policy.get_action(obs, seed=8)
    assert not np.array_equal(a.action_pred, c.action_pred)


def test_default_seed_is_zero_and_explicit_noise_matches_it(tiny_policy, gr1_request):
    obs = parse_observation(gr1_request, GR1)
    default = tiny_policy.get_action(obs)
    assert (default.noise_source, default.seed) == ("seed", 0)
    noise = torch.randn((1, 16, 32), generator=torch.Generator().manual_seed(0))[0].tolist()
    explicit = tiny_policy.get_action(obs, noise=noise)
    assert (explicit.noise_source, explicit.seed) == ("client", None)
    assert np.array_equal(default.action_pred, explicit.action_pred)


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
