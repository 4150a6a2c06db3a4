# SPDX-License-Identifier: Apache-2.0
"""The DiT and the VL self-attention equal the same networks assembled from diffusers' own
``Attention``, ``FeedForward``, ``Timesteps`` and ``TimestepEmbedding`` (the layers NVIDIA builds
them from), wired as NVIDIA's ``cross_attention_dit.py`` wires them (N1.5), on the same random weights."""

from __future__ import annotations

import pytest
import torch
from diffusers.models.attention import FeedForward as DiffusersFeedForward
from diffusers.models.attention_processor import Attention as DiffusersAttention
from diffusers.models.embeddings import TimestepEmbedding, Timesteps
from models.experimental.gr00t.common.configs import DiTConfig, VLSelfAttentionConfig
from models.experimental.gr00t.common.configs_n15 import Gr00tN15Config
from models.experimental.gr00t.common.quality import FP32_REFERENCE_ATOL, max_abs_diff
from models.experimental.gr00t.reference.torch_dit import DiT, SelfAttentionTransformer
from torch import nn

from ..conftest import randomize_


class OracleAdaNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, 2 * dim)
        self.norm = nn.LayerNorm(dim, eps=1e-5, elementwise_affine=False)

    def forward(self, x, temb):
        scale, shift = self.linear(nn.functional.silu(temb)).chunk(2, dim=1)
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]


class OracleBlock(nn.Module):
    def __init__(self, dim, heads, head_dim, context_dim, ada):
        super().__init__()
        self.ada = ada
        self.norm1 = OracleAdaNorm(dim) if ada else nn.LayerNorm(dim, eps=1e-5)
        self.attn1 = DiffusersAttention(query_dim=dim, heads=heads, dim_head=head_dim, cross_attention_dim=context_dim,
                                        bias=True, out_bias=True)
        self.norm3 = nn.LayerNorm(dim, eps=1e-5, elementwise_affine=not ada)
        self.ff = DiffusersFeedForward(dim, activation_fn="gelu-approximate", final_dropout=True)

    def forward(self, x, context=None, temb=None):
        n = self.norm1(x, temb) if self.ada else self.norm1(x)
        x = self.attn1(n, encoder_hidden_states=context) + x
        return self.ff(self.norm3(x)) + x


class OracleTimestepEncoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.time_proj = Timesteps(num_channels=256, flip_sin_to_cos=True, downscale_freq_shift=1)
        self.timestep_embedder = TimestepEmbedding(in_channels=256, time_embed_dim=dim)

    def forward(self, t):
        return self.timestep_embedder(self.time_proj(t).float())


class OracleDiT(nn.Module):
    def __init__(self, c: DiTConfig):
        super().__init__()
        d = c.inner_dim
        self.timestep_encoder = OracleTimestepEncoder(d)
        self.transformer_blocks = nn.ModuleList(
            OracleBlock(d, c.num_attention_heads, c.attention_head_dim,
                        c.cross_attention_dim if i % 2 == 0 else None, ada=True) for i in range(c.num_layers))
        self.norm_out = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.proj_out_1 = nn.Linear(d, 2 * d)
        self.proj_out_2 = nn.Linear(d, c.output_dim)

    def forward(self, x, context, t):
        temb = self.timestep_encoder(t)
        for i, block in enumerate(self.transformer_blocks):
            x = block(x, context if i % 2 == 0 else None, temb)
        shift, scale = self.proj_out_1(nn.functional.silu(temb)).chunk(2, dim=1)
        return self.proj_out_2(self.norm_out(x) * (1 + scale[:, None]) + shift[:, None])


@pytest.mark.parametrize("bucket", [0, 250, 500, 750])
def test_dit_matches_diffusers_assembly(bucket):
    c = Gr00tN15Config.tiny().action_head.dit
    oracle = randomize_(OracleDiT(c), seed=7).eval()
    ours = DiT(c)
    ours.load_state_dict(oracle.state_dict(), strict=True)
    g = torch.Generator().manual_seed(bucket)
    x, context = torch.randn(1, 49, c.inner_dim, generator=g), torch.randn(1, 296, c.cross_attention_dim, generator=g)
    t = torch.full((1,), bucket, dtype=torch.int64)
    with torch.no_grad():
        expected, got = oracle(x, context, t), ours(x, context, t)
    assert got.shape == (1, 49, c.output_dim)
    assert max_abs_diff(got, expected) < FP32_REFERENCE_ATOL


def test_dit_blocks_alternate_cross_and_self_attention():
    c = DiTConfig(num_attention_heads=2, attention_head_dim=8, num_layers=4, output_dim=8, cross_attention_dim=24)
    shapes = [DiT(c).transformer_blocks[i].attn1.to_k.weight.shape[1] for i in range(4)]
    assert shapes == [24, 16, 24, 16]


def test_vl_self_attention_matches_diffusers_assembly():
    c = Gr00tN15Config.tiny().action_head.vl_self_attention
    oracle = nn.Module()
    oracle.transformer_blocks = nn.ModuleList(
        OracleBlock(c.inner_dim, c.num_attention_heads, c.attention_head_dim, None, ada=False)
        for _ in range(c.num_layers))
    randomize_(oracle, seed=8).eval()
    ours = SelfAttentionTransformer(c)
    ours.load_state_dict(oracle.state_dict(), strict=True)
    x = torch.randn(1, 296, c.inner_dim, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        expected = x
        for block in oracle.transformer_blocks:
            expected = block(expected)
        got = ours(x)
    assert max_abs_diff(got, expected) < FP32_REFERENCE_ATOL


def test_full_size_block_shapes_follow_the_config():
    c = VLSelfAttentionConfig()
    block = SelfAttentionTransformer(VLSelfAttentionConfig(num_attention_heads=c.num_attention_heads,
                                                           attention_head_dim=c.attention_head_dim, num_layers=1))
    assert block.transformer_blocks[0].ff.net[0].proj.weight.shape == (8192, 2048)
