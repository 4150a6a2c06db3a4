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


# ---- Qwen3-VL vision tower (N1.7): merge order, interpolated position grid, 2-D RoPE ----------------
VISION_ROPE_THETA = 10000.0  # HF Qwen3VLVisionRotaryEmbedding default; not in any config file


def merge_order(h: int, w: int, merge: int, device: torch.device) -> torch.Tensor:
    """Raster indices (row * w + col) of an h×w patch grid listed in merge order: the image
    processor emits patches as (h/merge, w/merge, merge, merge) so that every ``merge²`` consecutive
    patches form one output token. [h * w] int64."""
    idx = torch.arange(h * w, device=device).view(h // merge, merge, w // merge, merge)
    return idx.transpose(1, 2).flatten()


def vision_position_embedding(table: torch.Tensor, grid_thw: list[list[int]], merge: int) -> torch.Tensor:
    """Bilinear interpolation of the learned ``side × side`` grid to each image's h×w grid, corners
    aligned (``linspace(0, side-1, n)``), in merge order, repeated over t. [N_patches, D]

    transformers 5.12.1 keeps the corner weights in fp32 and casts the weighted sum afterwards;
    4.57 (the version NVIDIA ran) cast the weights to the table dtype first. Same in fp32.
    """
    side = int(table.shape[0] ** 0.5)
    out = []
    for t, h, w in grid_thw:
        hs = torch.linspace(0, side - 1, h, device=table.device)  # [h] fractional source rows
        ws = torch.linspace(0, side - 1, w, device=table.device)
        h0, w0 = hs.int(), ws.int()  # floor (non-negative)
        h1, w1 = (h0 + 1).clamp(max=side - 1), (w0 + 1).clamp(max=side - 1)
        dh, dw = (hs - h0)[:, None], (ws - w0)[None, :]  # [h, 1], [1, w]
        corners = (
            (h0[:, None] * side + w0[None, :], (1 - dh) * (1 - dw)),
            (h0[:, None] * side + w1[None, :], (1 - dh) * dw),
            (h1[:, None] * side + w0[None, :], dh * (1 - dw)),
            (h1[:, None] * side + w1[None, :], dh * dw),
        )
        order = merge_order(h, w, merge, table.device)
        idx = torch.stack([i.flatten()[order] for i, _ in corners])  # [4, h*w]
        wgt = torch.stack([c.flatten()[order] for _, c in corners])  # [4, h*w] fp32
        out.append((table[idx] * wgt[:, :, None]).sum(0).repeat(t, 1))  # [t*h*w, D]
    return torch.cat(out)


def vision_rope_cos_sin(grid_thw: list[list[int]], head_dim: int, merge: int,
                        device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """2-D RoPE tables [N_patches, head_dim] (fp32): the first half of the rotary frequencies
    rotates by the patch row, the second by its column (each ``head_dim/4`` frequencies of
    ``1/10000^(2i/(head_dim/2))``), then duplicated for rotate-half."""
    rot = head_dim // 2
    inv_freq = 1.0 / (VISION_ROPE_THETA ** (torch.arange(0, rot, 2, dtype=torch.float32, device=device) / rot))
    rows, cols = [], []
    for t, h, w in grid_thw:
        order = merge_order(h, w, merge, device)
        rows.append((order // w).repeat(t))
        cols.append((order % w).repeat(t))
    rows, cols = torch.cat(rows).float(), torch.cat(cols).float()
    freqs = torch.cat((rows[:, None] * inv_freq, cols[:, None] * inv_freq), dim=-1)  # [N, head_dim/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [N, head_dim]
    return emb.cos(), emb.sin()
