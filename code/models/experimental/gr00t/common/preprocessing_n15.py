# SPDX-License-Identifier: Apache-2.0
"""The N1.5 eval image chain, as a short list of named pure steps.

NVIDIA's ``fourier_gr1_arms_only`` eval transforms followed by the Eagle 2.5 image processor
(``gr00t/data/transform/video.py``, ``gr00t/experiment/data_config.py`` and
``gr00t/model/backbone/eagle2_hg_model/``, ``n1.5-release``), reproduced bit-exactly:

    uint8 HWC → float [0,1] CHW → centre crop 0.95 → antialiased bilinear 224×224
      → truncating uint8 → (u8 − 127.5) / 127.5

The crop is computed on the frame as received; for the 256×256 GR1 frames NVIDIA requires this is
exactly NVIDIA's chain (their crop asserts the metadata resolution).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

CROP_SCALE = 0.95


# ---- the chain, step by step ---------------------------------------------------------------------
def to_float_chw(rgb: np.ndarray) -> torch.Tensor:
    """``VideoToTensor``: uint8 [H, W, 3] → float32 [3, H, W] in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1).to(torch.float32) / 255.0


def center_crop(x: torch.Tensor, scale: float = CROP_SCALE) -> torch.Tensor:
    """``VideoCrop(0.95)`` in eval: centre crop to ``int(side * scale)``. Offsets use Python's
    ``round`` (half to even) as torchvision's ``center_crop`` does: 256 → 243 starts at 6, not 7."""
    h, w = x.shape[-2:]
    ch, cw = int(h * scale), int(w * scale)
    top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
    return x[..., top:top + ch, left:left + cw]


def resize_bilinear(x: torch.Tensor, size: int) -> torch.Tensor:
    """``VideoResize(224, 224, 'linear')``: antialiased bilinear, aspect ratio not kept."""
    return F.interpolate(x.unsqueeze(0), size=(size, size), mode="bilinear", align_corners=False, antialias=True)[0]


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    """``VideoToNumpy``: ``(x * 255).to(uint8)`` truncates toward zero; NVIDIA does not round here."""
    return (x * 255.0).to(torch.uint8)


def eagle_normalize(u8: torch.Tensor) -> torch.Tensor:
    """Eagle 2.5 fast processor: rescale 1/255 fused with mean = std = 0.5, i.e. (u8 − 127.5) / 127.5."""
    return (u8.to(torch.float32) - 127.5) / 127.5


def n15_pixel_values(rgb: np.ndarray, image_size: int = 224) -> torch.Tensor:
    """One RGB frame → Eagle ``pixel_values`` [3, image_size, image_size] float32."""
    x = to_float_chw(rgb)
    x = center_crop(x)
    x = resize_bilinear(x, image_size)
    return eagle_normalize(to_uint8(x))
