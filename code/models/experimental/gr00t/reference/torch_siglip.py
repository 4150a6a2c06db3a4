# SPDX-License-Identifier: Apache-2.0
"""SigLIP vision tower as GR00T N1.5 uses it (HF transformers ``SiglipVisionModel``, inside Eagle 2.5).

Fixed 224² input, 14-px patches → 256 tokens, pre-LN encoder, ``post_layernorm`` output as the
feature. The attention-pooling ``head`` is part of the checkpoint and is loaded, but GR00T never uses
its output, so it has no forward here. Module names equal the checkpoint keys under
``backbone.eagle_model.vision_model.`` (and HF ``SiglipVisionModel``'s).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..common.configs import SiglipConfig


class SiglipEmbeddings(nn.Module):
    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.patch_embedding = nn.Conv2d(c.num_channels, c.hidden_size, kernel_size=c.patch_size, stride=c.patch_size)
        self.position_embedding = nn.Embedding(c.num_patches, c.hidden_size)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.patch_embedding(pixel_values)  # [B, D, 16, 16]
        x = x.flatten(2).transpose(1, 2)  # [B, 256, D], token = row * 16 + col
        return x + self.position_embedding.weight


class SiglipAttention(nn.Module):
    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.heads, self.head_dim = c.num_attention_heads, c.head_dim
        d = c.hidden_size
        # Definition order follows HF so state-dict order matches the checkpoint.
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.q_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)  # [B, H, S, hd]
        k = self.k_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, scale=self.head_dim**-0.5)  # no mask
        return self.out_proj(o.transpose(1, 2).reshape(b, s, -1))


class SiglipMLP(nn.Module):
    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.fc1 = nn.Linear(c.hidden_size, c.intermediate_size)
        self.fc2 = nn.Linear(c.intermediate_size, c.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class SiglipEncoderLayer(nn.Module):
    attention = SiglipAttention  # N1.6's SigLIP2 layer swaps in its per-image attention (torch_eagle3_n16)

    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.self_attn = self.attention(c)
        self.layer_norm2 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.mlp = SiglipMLP(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class SiglipEncoder(nn.Module):
    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.layers = nn.ModuleList(SiglipEncoderLayer(c) for _ in range(c.num_hidden_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class SiglipPoolingHead(nn.Module):
    """Weights only: the checkpoint carries them, GR00T never computes the pooled output."""

    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.probe = nn.Parameter(torch.empty(1, 1, c.hidden_size))
        self.attention = nn.MultiheadAttention(c.hidden_size, c.num_attention_heads, batch_first=True)
        self.layernorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.mlp = SiglipMLP(c)


class SiglipVisionTransformer(nn.Module):
    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.embeddings = SiglipEmbeddings(c)
        self.encoder = SiglipEncoder(c)
        self.post_layernorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.head = SiglipPoolingHead(c)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[B, 3, 224, 224] → last_hidden_state [B, 256, D] (post_layernorm applied)."""
        return self.post_layernorm(self.encoder(self.embeddings(pixel_values)))


class SiglipVisionModel(nn.Module):
    """Wrapper level that gives the checkpoint its doubled ``vision_model.vision_model`` prefix."""

    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.vision_model = SiglipVisionTransformer(c)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.vision_model(pixel_values)
