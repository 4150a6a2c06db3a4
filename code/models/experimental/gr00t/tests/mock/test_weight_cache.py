# SPDX-License-Identifier: Apache-2.0
"""TT-NN weight conversion and its disk cache on the tiny N1.5 checkpoint: every used checkpoint tensor
is consumed once (as itself or fused), in the layout and dtype the policy says, equal to the checkpoint
up to that dtype and the documented padding; a second conversion with the same key reads only the
cache; another policy gets another cache."""

from __future__ import annotations

import pytest
import torch

from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
from models.experimental.gr00t.common.configs_n15 import Gr00tN15Config
from models.experimental.gr00t.common.errors import ConfigError
from models.experimental.gr00t.common.layouts import GR1
from models.experimental.gr00t.tt.policy import TTPolicy
from models.experimental.gr00t.tt.weight_cache import convert_checkpoint, load_cached
from models.experimental.gr00t.tt.weight_layout import tile_up
from models.experimental.gr00t.tt.weight_layout_n15 import SKIPPED

pytestmark = pytest.mark.mock

DIT_FF = "action_head.model.transformer_blocks.0.ff.net.0.proj.weight"
DIT_BIAS = "action_head.model.transformer_blocks.0.ff.net.0.proj.bias"
DIT_CROSS_K = "action_head.model.transformer_blocks.0.attn1.k.weight"
DIT_SELF_QKV = "action_head.model.transformer_blocks.1.attn1.qkv.weight"
LLM_ATTN = "backbone.eagle_model.language_model.model.layers.0.self_attn."
LLM_QKV = LLM_ATTN + "qkv.weight"
STATE_W = "action_head.state_encoder.layer1.W"
PATCH = "backbone.eagle_model.vision_model.vision_model.embeddings.patch_embedding.weight"
EMBED = "backbone.eagle_model.language_model.model.embed_tokens.weight"


def test_policy_defaults_overrides_and_errors():
    p = TTPolicy()
    assert p.to_dict() == {"dtype_policy": "mixed_dit", "trace_layout": "per_stage", "vit_fork": True}
    assert [p.weight_dtype(n) for n in (DIT_FF, DIT_CROSS_K, DIT_SELF_QKV, DIT_BIAS, LLM_QKV)] == \
        ["bfloat8_b"] * 3 + ["bfloat16"] * 2
    assert p.with_env_overrides({"GR00T_POLICY": "bf16"}).weight_dtype(DIT_FF) == "bfloat16"
    with pytest.raises(ConfigError, match="GR00T_POLICY"):
        p.with_env_overrides({"GR00T_POLICY": "fp8"})


@pytest.fixture(scope="module")
def converted(mock_device, tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("tt-cache")
    info = convert_checkpoint(tiny_checkpoint, root, weights_id="tiny-seed0", policy=TTPolicy(), layout=GR1,
                              log=lambda _: None)
    return root, info, load_cached(info)


def test_every_used_tensor_is_converted_once(converted, tiny_checkpoint):
    _, info, tensors = converted
    used = {n for n in LazyCheckpoint(tiny_checkpoint).names if not n.startswith(SKIPPED)}
    assert info.converted and info.tensors == len(tensors)
    fused = {n for n in used if ".self_attn." in n and n.rsplit(".", 2)[-2] in ("q_proj", "k_proj", "v_proj")
             or ".attn1.to_" in n and ".to_out." not in n}
    assert fused and used - fused <= set(tensors)  # everything not fused is converted under its own name
    assert all(n in used or n.endswith(("qkv.weight", "qkv.bias", "q.weight", "q.bias", "k.weight", "v.weight"))
               for n in tensors)
    assert not any(n.startswith(SKIPPED) for n in tensors)


def test_layouts_and_dtypes_follow_the_policy(converted, tiny_checkpoint):
    import ttnn

    _, _, t = converted
    ckpt = LazyCheckpoint(tiny_checkpoint)
    assert t[DIT_FF].dtype == ttnn.bfloat8_b and t[DIT_FF].layout == ttnn.TILE_LAYOUT
    assert t[DIT_SELF_QKV].dtype == ttnn.bfloat8_b and t[DIT_CROSS_K].dtype == ttnn.bfloat8_b
    assert t[LLM_QKV].dtype == ttnn.bfloat16 and t[EMBED].layout == ttnn.ROW_MAJOR_LAYOUT
    # fused Q|K|V, stored [in, out], each head zero-padded to a tile multiple (tiny Qwen3: 16 → 32), q/k
    # scaled by sqrt(32/16) to keep the per-head RMSNorm exact over the padded head
    c = Gr00tN15Config.tiny().backbone.text
    hd, hp = c.head_dim, tile_up(c.head_dim)
    qkv = ttnn.to_torch(t[LLM_QKV]).float()
    assert tuple(qkv.shape) == (c.hidden_size, (c.num_attention_heads + 2 * c.num_key_value_heads) * hp)
    heads = qkv.t().reshape(-1, hp, c.hidden_size)  # [H_q + 2·H_kv, hd', in]
    assert torch.count_nonzero(heads[:, hd:]) == 0
    q = ckpt.load(LLM_ATTN + "q_proj.weight", torch.float32).reshape(c.num_attention_heads, hd, -1)
    v = ckpt.load(LLM_ATTN + "v_proj.weight", torch.float32).reshape(c.num_key_value_heads, hd, -1)
    scale = (hp / hd) ** 0.5
    assert torch.allclose(heads[: c.num_attention_heads, :hd], q * scale, rtol=1e-2, atol=1e-2)
    assert torch.allclose(heads[-c.num_key_value_heads:, :hd], v, rtol=1e-2, atol=1e-2)
    ff = ckpt.load(DIT_FF, torch.float32).t()
    rel = ((ttnn.to_torch(t[DIT_FF]).float() - ff).norm() / ff.norm()).item()
    assert 0 < rel < 0.02  # bfloat8_b: close but not exact
    # embodiment-specific layers keep only the served embodiment's row (GR1: slot 24)
    w = ckpt.load(STATE_W, torch.float32)
    assert torch.allclose(ttnn.to_torch(t[STATE_W]).float(), w[24], rtol=1e-2, atol=1e-2)
    # the patch convolution becomes a [C*k*k, D] matmul weight, its 588 rows padded to 608 with zeros
    p = ckpt.load(PATCH, torch.float32)
    patch = ttnn.to_torch(t[PATCH]).float()
    assert tuple(patch.shape) == (608, p.shape[0]) and torch.count_nonzero(patch[588:]) == 0


def test_second_conversion_reads_only_the_cache_and_the_policy_is_in_the_key(converted, tiny_checkpoint):
    root, first, _ = converted
    again = convert_checkpoint(tiny_checkpoint, root, weights_id="tiny-seed0", policy=TTPolicy(), layout=GR1,
                               log=lambda _: None)
    assert not again.converted and again.path == first.path and again.nbytes == first.nbytes
    other = convert_checkpoint(tiny_checkpoint, root, weights_id="tiny-seed0", policy=TTPolicy(dtype_policy="bf16"),
                               layout=GR1, log=lambda _: None)
    assert other.converted and other.path != first.path
    assert load_cached(other)[DIT_FF].dtype.name == "BFLOAT16"
