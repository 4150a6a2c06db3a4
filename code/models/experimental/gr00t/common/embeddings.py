# SPDX-License-Identifier: Apache-2.0
"""Position and timestep encodings as plain torch math, shared by the reference and the TT port (which
builds its device tables from them once, on the host)."""

from __future__ import annotations

import math

import torch


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-interleaved ("rotate half") RoPE tables [S, head_dim] for integer positions [S]."""
    steps = torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device).to(torch.float32)
    inv_freq = 1.0 / (theta ** (steps / head_dim))
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # [S, hd/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def timestep_sinusoid(timesteps: torch.Tensor, channels: int, max_period: float = 10000.0) -> torch.Tensor:
    """diffusers ``Timesteps(channels, flip_sin_to_cos=True, downscale_freq_shift=1)``:
    [cos, sin] of ``t · exp(−ln(max_period) · k / (channels/2 − 1))``. Input [B] → [B, channels]."""
    half = channels // 2
    exponent = -math.log(max_period) * torch.arange(0, half, dtype=torch.float32, device=timesteps.device) / (half - 1)
    args = timesteps[:, None].float() * torch.exp(exponent)[None, :]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def action_sinusoid(buckets: torch.Tensor, dim: int) -> torch.Tensor:
    """[B, T] integer buckets → [B, T, dim]: [sin, cos] of ``t · exp(−k · ln(1e4) / (dim/2))``
    (sin first; the DiT's timestep sinusoid is the other way round)."""
    half = dim // 2
    exponent = -torch.arange(half, dtype=torch.float32, device=buckets.device) * (math.log(10000.0) / half)
    freqs = buckets.float().unsqueeze(-1) * exponent.exp()
    return torch.cat([torch.sin(freqs), torch.cos(freqs)], dim=-1)
