# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6 backbone (``reference/torch_backbone_n16.py``): strict loading of every ``backbone.`` tensor of a tiny
synthetic checkpoint, the real-size names, the image splice order, and the LLM part against transformers'
``Qwen3Model`` on the same weights and spliced embeddings (feature = final norm of the last kept layer)."""

from __future__ import annotations

import pytest
import torch
from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
from models.experimental.gr00t.common.configs_n16 import Eagle3Config, Gr00tN16Config
from models.experimental.gr00t.common.prompts_n16 import n16_prompt_ids
from models.experimental.gr00t.common.quality import FP32_REFERENCE_ATOL, max_abs_diff
from models.experimental.gr00t.common.weights import n16_inventory
from models.experimental.gr00t.reference.torch_backbone_n16 import LM_HEAD_KEY, Eagle3Backbone
from transformers import Qwen3Config as HFQwen3Config
from transformers import Qwen3Model as HFQwen3Model

from ..conftest import randomize_

SIZES = [(56, 84), (28, 56), (84, 28)]  # px → 2·3, 1·2, 3·1 image tokens


@pytest.fixture(scope="module")
def tiny(tiny_checkpoints):
    path = tiny_checkpoints["n16"]
    config = Gr00tN16Config.from_checkpoint(path)
    return Eagle3Backbone.from_checkpoint(LazyCheckpoint(path), config.backbone), LazyCheckpoint(path)


def images(seed: int = 3, sizes=SIZES) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(3, h, w, generator=g) * 2 - 1 for h, w in sizes]


def counts(sizes=SIZES) -> list[int]:
    return [(h // 28) * (w // 28) for h, w in sizes]


def prompt(text: str = "Pick the pear, place it in the plate.", sizes=SIZES):
    p = n16_prompt_ids(text, counts(sizes))
    return p, torch.tensor([p.input_ids])


def hf_qwen3(c: Eagle3Config, num_layers: int, state: dict[str, torch.Tensor]) -> HFQwen3Model:
    fields = {k: v for k, v in c.text.to_hf_dict().items() if k not in ("model_type", "architectures")}
    hf_config = HFQwen3Config(**{**fields, "num_hidden_layers": num_layers})
    hf_config._attn_implementation = "eager"
    hf = randomize_(HFQwen3Model(hf_config), seed=9).eval()  # layers past ours keep these random weights
    hf.load_state_dict(state, strict=False)
    return hf


def test_loads_every_backbone_tensor_of_a_tiny_checkpoint_strictly(tiny):
    backbone, ckpt = tiny
    stored = {n for n in ckpt.names if n.startswith("backbone.")}
    ours = {"backbone." + k for k in backbone.state_dict()}
    assert ours | {LM_HEAD_KEY} == stored and LM_HEAD_KEY not in ours  # nothing missing, nothing unexpected
    values = ckpt.load_many(sorted(ours), dtype=torch.float32)
    for k, v in backbone.state_dict().items():
        assert v.device.type == "cpu" and v.dtype == torch.float32
        assert torch.equal(v, values["backbone." + k]), k


def test_real_size_names_and_shapes_are_the_633_backbone_tensors():
    with torch.device("meta"):
        backbone = Eagle3Backbone(Eagle3Config())
    ours = {"backbone." + k: tuple(v.shape) for k, v in backbone.state_dict().items()}
    released = {s.name: tuple(s.shape) for s in n16_inventory(Gr00tN16Config.full()) if s.name.startswith("backbone.")}
    assert len(released) == 633 and len(ours) == 632
    assert ours == {k: v for k, v in released.items() if k != LM_HEAD_KEY}
    assert sum(1 for k in ours if ".language_model.model.layers." in k and k.endswith("q_proj.weight")) == 16


def test_image_tokens_are_spliced_in_order_row_major(tiny):
    backbone, _ = tiny
    model = backbone.model
    p, ids = prompt()
    with torch.no_grad():
        tokens = model.image_tokens(images())
        got = model.splice(ids, tokens)
        expected = model.language_model.model.embed_tokens(ids).clone()
        for (start, n), t in zip(p.image_spans, tokens):
            expected[0, start:start + n] = t
    assert [t.shape[0] for t in tokens] == counts()
    assert torch.equal(got, expected)
    with pytest.raises(ValueError, match="11 <IMG_CONTEXT> tokens but the images gave 6"):
        model.splice(ids, tokens[:1])


def test_masks_and_the_llm_match_transformers_qwen3(tiny):
    backbone, _ = tiny
    c, model = backbone.config, backbone.model
    p, ids = prompt()
    with torch.no_grad():
        out = backbone(ids, images())
        embeds = model.splice(ids, model.image_tokens(images()))
        hf = hf_qwen3(c, c.select_layer, model.language_model.model.state_dict())
        expected = hf(inputs_embeds=embeds).last_hidden_state
    assert out["backbone_features"].shape == (1, len(p.input_ids), c.text.hidden_size)
    diff = max_abs_diff(out["backbone_features"], expected)
    assert diff <= FP32_REFERENCE_ATOL, diff
    image = torch.zeros(1, len(p.input_ids), dtype=torch.bool)
    image[0, p.image_positions] = True
    assert torch.equal(out["image_mask"], image) and torch.equal(out["text_mask"], ~image)
    assert bool(out["backbone_attention_mask"].all())


def test_feature_is_the_final_norm_of_the_last_kept_layer_of_the_deeper_llm(tiny):
    backbone, _ = tiny
    c, model = backbone.config, backbone.model
    assert c.text.num_hidden_layers > c.select_layer  # the tiny LLM is cut (6 → 4) like the real one (28 → 16)
    _, ids = prompt()
    with torch.no_grad():
        embeds = model.splice(ids, model.image_tokens(images()))
        hf = hf_qwen3(c, c.text.num_hidden_layers, model.language_model.model.state_dict())
        hidden = hf(inputs_embeds=embeds, output_hidden_states=True).hidden_states[c.select_layer]  # un-normed
        got = backbone(ids, images())["backbone_features"]
    assert max_abs_diff(got, hf.norm(hidden)) <= FP32_REFERENCE_ATOL
    assert max_abs_diff(got, hidden) > 1e-2  # skipping the final norm would be caught


def test_a_batch_fills_samples_in_order(tiny):
    backbone, _ = tiny
    _, ids = prompt()
    first, second = images(3), images(4)
    with torch.no_grad():
        both = backbone(ids.repeat(2, 1), first + second)["backbone_features"]
        alone = [backbone(ids, imgs)["backbone_features"][0] for imgs in (first, second)]
    assert max_abs_diff(both[0], alone[0]) <= FP32_REFERENCE_ATOL
    assert max_abs_diff(both[1], alone[1]) <= FP32_REFERENCE_ATOL
    assert max_abs_diff(alone[0], alone[1]) > 1e-3


def test_padding_is_refused(tiny):
    backbone, _ = tiny
    _, ids = prompt()
    mask = torch.ones_like(ids)
    mask[0, 0] = 0
    with pytest.raises(ValueError, match="padded prompts"):
        backbone(ids, images(), attention_mask=mask)
