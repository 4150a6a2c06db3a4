# SPDX-License-Identifier: Apache-2.0
"""Our truncated Qwen3 equals transformers' Qwen3Model on the same random weights: the feature is the
final norm applied to the last kept layer (NVIDIA pops layers select_layer.. and reads the last
hidden state)."""

from __future__ import annotations

import torch
from models.experimental.gr00t.common.configs_n15 import Gr00tN15Config
from models.experimental.gr00t.common.quality import FP32_REFERENCE_ATOL, max_abs_diff
from models.experimental.gr00t.reference.torch_qwen3 import Qwen3Model
from transformers import Qwen3Config as HFQwen3Config
from transformers import Qwen3Model as HFQwen3Model

from ..conftest import randomize_


def hf_qwen3(num_layers: int) -> HFQwen3Model:
    c = Gr00tN15Config.tiny().backbone.text
    fields = {k: v for k, v in c.to_hf_dict().items() if k not in ("model_type", "architectures")}
    hf_config = HFQwen3Config(**{**fields, "num_hidden_layers": num_layers})
    hf_config._attn_implementation = "eager"
    torch.manual_seed(0)
    return randomize_(HFQwen3Model(hf_config), seed=4).eval()


def test_truncated_decoder_matches_transformers_last_hidden_state():
    select = Gr00tN15Config.tiny().backbone.select_layer
    hf = hf_qwen3(select)
    ours = Qwen3Model(Gr00tN15Config.tiny().backbone.text, select)
    ours.load_state_dict(hf.state_dict(), strict=True)
    ids = torch.randint(0, 151680, (1, 296), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = hf(input_ids=ids).last_hidden_state
        got = ours(ours.embed_tokens(ids))
    assert max_abs_diff(got, expected) < FP32_REFERENCE_ATOL


def test_feature_is_final_norm_of_layer_select_in_a_deeper_model():
    c = Gr00tN15Config.tiny().backbone
    hf = hf_qwen3(c.text.num_hidden_layers)  # all 4 layers, of which GR00T keeps 2
    ours = Qwen3Model(c.text, c.select_layer)
    state = {k: v for k, v in hf.state_dict().items() if not k.startswith(("layers.2.", "layers.3."))}
    ours.load_state_dict(state, strict=True)
    ids = torch.randint(0, 151680, (1, 50), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        hidden = hf(input_ids=ids, output_hidden_states=True).hidden_states[c.select_layer]  # un-normed here
        expected = hf.norm(hidden)
        got = ours(ours.embed_tokens(ids))
    assert max_abs_diff(got, expected) < FP32_REFERENCE_ATOL
    assert max_abs_diff(got, hidden) > 1e-2  # the norm matters: skipping it would be caught
