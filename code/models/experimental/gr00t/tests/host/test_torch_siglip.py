# SPDX-License-Identifier: Apache-2.0
"""Our SigLIP tower equals transformers' own SiglipVisionModel on the same random weights."""

from __future__ import annotations

import pytest
import torch
from models.experimental.gr00t.common.configs_n15 import Gr00tN15Config
from models.experimental.gr00t.common.quality import FP32_REFERENCE_ATOL, max_abs_diff
from models.experimental.gr00t.reference.torch_siglip import SiglipVisionModel
from transformers import SiglipVisionConfig
from transformers import SiglipVisionModel as HFSiglipVisionModel

from ..conftest import randomize_


def hf_siglip(attn: str) -> HFSiglipVisionModel:
    c = Gr00tN15Config.tiny().backbone.vision
    hf_config = SiglipVisionConfig(**{k: v for k, v in c.to_hf_dict().items() if k != "model_type"})
    hf_config._attn_implementation = attn
    torch.manual_seed(0)
    return randomize_(HFSiglipVisionModel(hf_config), seed=1).eval()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_siglip_tower_matches_transformers(attn):
    hf = hf_siglip(attn)
    ours = SiglipVisionModel(Gr00tN15Config.tiny().backbone.vision)
    # transformers 5 flattened SiglipVisionModel; the checkpoint (saved by 4.51) keeps the inner
    # ``vision_model.`` level, which our wrapper reproduces. Below it, names are identical.
    ours.vision_model.load_state_dict(hf.state_dict(), strict=True)
    pixels = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(2)) * 2 - 1
    with torch.no_grad():
        expected = hf(pixel_values=pixels).last_hidden_state
        got = ours(pixels)
    assert got.shape == (2, 256, 64)
    assert max_abs_diff(got, expected) < FP32_REFERENCE_ATOL


def test_siglip_first_layer_matches_transformers():
    hf = hf_siglip("eager")
    ours = SiglipVisionModel(Gr00tN15Config.tiny().backbone.vision)
    ours.vision_model.load_state_dict(hf.state_dict(), strict=True)
    x = torch.randn(1, 256, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = hf.encoder.layers[0](x, attention_mask=None)
        expected = expected[0] if isinstance(expected, tuple) else expected
        got = ours.vision_model.encoder.layers[0](x)
    assert max_abs_diff(got, expected) < FP32_REFERENCE_ATOL
