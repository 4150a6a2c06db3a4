# SPDX-License-Identifier: Apache-2.0
"""Qwen3 text decoder, truncated to GR00T's ``select_layer`` layers plus the final norm (HF ``Qwen3Model``).

GR00T deletes layers ``select_layer..`` from the LLM and reads ``hidden_states[select_layer]``, which
is the final ``norm`` applied to the last kept layer's output. No lm_head: its logits are never used.
Module names equal the checkpoint keys under ``backbone.eagle_model.language_model.model.``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..common.configs import Qwen3Config
from ..common.embeddings import rope_cos_sin


class Qwen3RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin


class Qwen3Attention(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=False)
        # Per-head RMSNorms on q and k, applied before RoPE.
        self.q_norm = Qwen3RMSNorm(c.head_dim, c.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(c.head_dim, c.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, s, self.heads, self.head_dim)).transpose(1, 2)  # [B, H, S, hd]
        k = self.k_norm(self.k_proj(x).view(b, s, self.kv_heads, self.head_dim)).transpose(1, 2)  # [B, KV, S, hd]
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        groups = self.heads // self.kv_heads  # KV head j serves query heads j*groups .. j*groups+groups-1
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.head_dim**-0.5)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, -1))


class Qwen3MLP(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.self_attn = Qwen3Attention(c)
        self.mlp = Qwen3MLP(c)
        self.input_layernorm = Qwen3RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Model(nn.Module):
    """Embeddings + the first ``num_layers`` decoder layers + final RMSNorm."""

    def __init__(self, c: Qwen3Config, num_layers: int):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Qwen3DecoderLayer(c) for _ in range(num_layers))
        self.norm = Qwen3RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, inputs_embeds: torch.Tensor) -> torch.Tensor:
        """[B, S, D] embeddings → normed hidden state of the last kept layer [B, S, D] (causal,
        positions 0..S-1, no padding: batch 1)."""
        positions = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta)
        cos, sin = cos.to(inputs_embeds.dtype), sin.to(inputs_embeds.dtype)
        x = inputs_embeds
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class Qwen3LanguageModel(nn.Module):
    """Wrapper level for the checkpoint's ``language_model.model.`` prefix (lm_head omitted)."""

    def __init__(self, c: Qwen3Config, num_layers: int):
        super().__init__()
        self.model = Qwen3Model(c, num_layers)
