# SPDX-License-Identifier: Apache-2.0
"""Position and timestep encodings as plain torch math, shared by the reference and the TT port (which
builds its device tables from them once, on the host)."""

from __future__ import annotations

import math

import torch

from .configs import Qwen3VLConfig, Qwen3VLTextConfig


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


# ---- Qwen3-VL text decoder (N1.7): 3-axis M-RoPE ---------------------------------------------------
def rope_index(input_ids: torch.Tensor, image_grid_thw: torch.Tensor, config: Qwen3VLConfig) -> torch.Tensor:
    """3-axis M-RoPE position ids [3, 1, S] (T, H, W) for a batch-1, unpadded, images-only prompt
    (HF ``Qwen3VLModel.get_rope_index``). Text advances all axes together; a run of image tokens
    for merged grid (t, h, w) starting at ``p`` gets ``(p + ti, p + r, p + c)`` in raster order, and
    the next token continues at ``p + max(h, w)``."""
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"rope_index takes input_ids [1, S], got {tuple(input_ids.shape)}")
    ids, dev, m = input_ids[0].tolist(), input_ids.device, config.vision.spatial_merge_size
    grids = [[int(v) for v in g] for g in image_grid_thw.tolist()]
    chunks, pos, i, k = [], 0, 0, 0
    while i < len(ids):
        is_image = ids[i] == config.image_token_id
        j = i
        while j < len(ids) and (ids[j] == config.image_token_id) == is_image:
            j += 1
        if not is_image:
            chunks.append(torch.arange(pos, pos + j - i, device=dev).expand(3, -1))
            pos += j - i
        else:
            if k == len(grids):
                raise ValueError(f"prompt has more image-token runs than the {len(grids)} images given")
            t, h, w = grids[k][0], grids[k][1] // m, grids[k][2] // m
            if j - i != t * h * w:
                raise ValueError(f"image {k}: {j - i} image tokens in the prompt, grid {grids[k]} gives {t * h * w}")
            tt = torch.arange(t, device=dev).repeat_interleave(h * w)
            hh = torch.arange(h, device=dev).repeat_interleave(w).repeat(t)
            ww = torch.arange(w, device=dev).repeat(h * t)
            chunks.append(torch.stack((tt, hh, ww)) + pos)
            pos += max(h, w)
            k += 1
        i = j
    if k != len(grids):
        raise ValueError(f"prompt has {k} image-token runs but {len(grids)} images were given")
    return torch.cat(chunks, dim=1).view(3, 1, -1)


def mrope_cos_sin(position_ids: torch.Tensor, c: Qwen3VLTextConfig,
                  dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Interleaved M-RoPE tables [B, S, head_dim] from position ids [3, B, S]. Frequency j takes its
    position from H when ``j % 3 == 1`` and W when ``j % 3 == 2`` within the first ``3·section``
    frequencies of that axis, otherwise from T. Computed in fp32, cast to the activation dtype."""
    hd = c.head_dim
    exponent = torch.arange(0, hd, 2, dtype=torch.int64, device=position_ids.device).float() / hd
    inv_freq = 1.0 / (c.rope_theta ** exponent)  # [hd/2]
    freqs = position_ids[..., None].float() * inv_freq  # [3, B, S, hd/2]
    f = freqs[0].clone()
    for axis in (1, 2):  # H, W
        sl = slice(axis, 3 * c.mrope_section[axis], 3)
        f[..., sl] = freqs[axis, ..., sl]
    emb = torch.cat((f, f), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)
