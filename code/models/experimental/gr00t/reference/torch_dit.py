# SPDX-License-Identifier: Apache-2.0
"""The action head's transformers (``DiT`` and ``SelfAttentionTransformer`` of NVIDIA's
``gr00t/model/action_head/cross_attention_dit.py``, ``n1.5-release``): the 16-block AdaLN DiT that alternates
cross-attention to the VL tokens (even blocks) with self-attention (odd blocks), and the 4-block
VL self-attention transformer. Both are built from the same pre-LN block, as in NVIDIA's code, with
diffusers' layer conventions (``to_out.0``, ``ff.net.0.proj`` / ``ff.net.2``). No masks anywhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..common.configs import DiTConfig, VLSelfAttentionConfig
from ..common.embeddings import timestep_sinusoid


class Attention(nn.Module):
    """Multi-head attention with biased projections; K/V from ``context`` when given (cross)."""

    def __init__(self, dim: int, heads: int, head_dim: int, context_dim: int | None = None):
        super().__init__()
        inner, kv_in = heads * head_dim, context_dim or dim
        self.heads, self.head_dim = heads, head_dim
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(kv_in, inner)
        self.to_v = nn.Linear(kv_in, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim), nn.Dropout(0.0)])

    def project_kv(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, s, _ = context.shape
        k = self.to_k(context).view(b, s, self.heads, self.head_dim).transpose(1, 2)  # [B, H, S_kv, hd]
        v = self.to_v(context).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        return k, v

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None,
                key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``key_mask`` [B, S_kv] bool, True = attend (N1.7's text-only / image-only cross blocks)."""
        b, s, _ = x.shape
        q = self.to_q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)  # [B, H, S, hd]
        k, v = self.project_kv(x if context is None else context)
        mask = None if key_mask is None else key_mask[:, None, None, :]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.head_dim**-0.5)
        return self.to_out[0](o.transpose(1, 2).reshape(b, s, -1))


class GELUProj(nn.Module):
    """diffusers ``GELU(approximate='tanh')``: a Linear followed by tanh-GELU."""

    def __init__(self, dim: int, inner: int):
        super().__init__()
        self.proj = nn.Linear(dim, inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x), approximate="tanh")


class FeedForward(nn.Module):
    def __init__(self, dim: int, mult: int = 4):
        super().__init__()
        self.net = nn.ModuleList([GELUProj(dim, dim * mult), nn.Dropout(0.0), nn.Linear(dim * mult, dim)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net[2](self.net[0](x))


class AdaLayerNorm(nn.Module):
    """``LN_noaffine(x) · (1 + scale) + shift`` with (scale, shift) = chunk2(linear(silu(temb))):
    scale first, unlike the output layer."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.linear = nn.Linear(dim, 2 * dim)
        self.norm = nn.LayerNorm(dim, eps=eps, elementwise_affine=False)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        scale, shift = self.linear(F.silu(temb)).chunk(2, dim=-1)  # [B, D] each
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]


class TransformerBlock(nn.Module):
    """Pre-LN block: ``x += attn(norm1(x)[, context])``; ``x += ff(norm3(x))``.

    ``ada_norm`` (DiT): norm1 is AdaLayerNorm on the timestep embedding, norm3 has no affine.
    ``layer_norm`` (VL self-attention): both norms are affine LayerNorms.
    """

    def __init__(self, dim: int, heads: int, head_dim: int, *, context_dim: int | None, ada_norm: bool, eps: float):
        super().__init__()
        self.ada_norm = ada_norm
        self.norm1 = AdaLayerNorm(dim, eps) if ada_norm else nn.LayerNorm(dim, eps=eps)
        self.attn1 = Attention(dim, heads, head_dim, context_dim)
        self.norm3 = nn.LayerNorm(dim, eps=eps, elementwise_affine=not ada_norm)
        self.ff = FeedForward(dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, temb: torch.Tensor | None = None,
                key_mask: torch.Tensor | None = None) -> torch.Tensor:
        n = self.norm1(x, temb) if self.ada_norm else self.norm1(x)
        x = x + self.attn1(n, context, key_mask)
        return x + self.ff(self.norm3(x))


class TimestepEmbedding(nn.Module):
    def __init__(self, in_dim: int, dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(in_dim, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class TimestepEncoder(nn.Module):
    def __init__(self, channels: int, dim: int):
        super().__init__()
        self.channels = channels
        self.timestep_embedder = TimestepEmbedding(channels, dim)

    def forward(self, timesteps: torch.Tensor) -> torch.Tensor:
        proj = timestep_sinusoid(timesteps, self.channels).to(self.timestep_embedder.linear_1.weight.dtype)
        return self.timestep_embedder(proj)  # [B, D]


class DiT(nn.Module):
    """``action_head.model``: state (+ future) + action tokens [B, T, D] → [B, T, output_dim].

    N1.5: every cross block sees all VL tokens. N1.7 (AlternateVLDiT): cross blocks alternate between
    the text tokens and the image tokens, selected by ``key_masks`` {"text": [B, S], "image": [B, S]}."""

    def __init__(self, c: DiTConfig):
        super().__init__()
        self.config = c
        d = c.inner_dim
        self.timestep_encoder = TimestepEncoder(c.timestep_channels, d)
        self.transformer_blocks = nn.ModuleList(
            TransformerBlock(d, c.num_attention_heads, c.attention_head_dim,
                             context_dim=c.cross_attention_dim if c.cross_attends(i) else None, ada_norm=True,
                             eps=c.norm_eps)
            for i in range(c.num_layers)
        )
        self.norm_out = nn.LayerNorm(d, eps=c.out_norm_eps, elementwise_affine=False)
        self.proj_out_1 = nn.Linear(d, 2 * d)
        self.proj_out_2 = nn.Linear(d, c.output_dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor, timesteps: torch.Tensor,
                key_masks: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        temb = self.timestep_encoder(timesteps)  # [B, D], shared by every block and the output layer
        c = self.config
        for i, block in enumerate(self.transformer_blocks):
            if c.cross_attends(i):
                keys = c.cross_keys(i)
                x = block(x, context, temb, None if keys == "all" else key_masks[keys])
            else:
                x = block(x, None, temb)
        shift, scale = self.proj_out_1(F.silu(temb)).chunk(2, dim=-1)  # shift first here
        return self.proj_out_2(self.norm_out(x) * (1 + scale[:, None]) + shift[:, None])


class SelfAttentionTransformer(nn.Module):
    """``action_head.vl_self_attention``: affine pre-LN blocks over the VL tokens, no final norm."""

    def __init__(self, c: VLSelfAttentionConfig):
        super().__init__()
        d = c.inner_dim
        self.transformer_blocks = nn.ModuleList(
            TransformerBlock(d, c.num_attention_heads, c.attention_head_dim, context_dim=None, ada_norm=False,
                             eps=c.norm_eps)
            for _ in range(c.num_layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.transformer_blocks:
            x = block(x)
        return x
