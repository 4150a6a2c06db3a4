# SPDX-License-Identifier: Apache-2.0
"""The N1.7 DROID image and text chain, as a short list of named pure steps.

NVIDIA's N1.7 eval path (``use_albumentations``: ``build_image_transformations_albumentations`` in
``gr00t/model/gr00t_n1d7/image_augmentations.py``, then the Qwen3-VL image processor; the instruction goes
through upstream's ``formalize_language``: lower-cased, punctuation dropped). Per camera frame:

    uint8 HWC → shortest edge 256 (INTER_AREA) → centre crop 0.95 → shortest edge 256 (INTER_AREA)
      → Qwen smart resize (multiple of 32) with antialiased bicubic on uint8
      → (u8 − 127.5) / 127.5 → duplicate to 2 time steps → 16×16 patches in 2×2 merge order

180×320 → 256×455 → 243×432 → 256×455 → 256×448 → grid (1, 16, 28): 448 patches, 112 tokens.
The Qwen steps reproduce transformers' torchvision-backend ``Qwen2VLImageProcessor`` (the class
transformers maps ``qwen3_vl`` to) bit for bit on CPU.
"""

from __future__ import annotations

import math
import re

import cv2
import numpy as np
import torch
from torchvision.transforms.v2 import functional as TF

from .errors import InputError
from .host_threads import frame_map

SHORTEST_EDGE = 256
CROP_FRACTION = 0.95
PATCH_SIZE, TEMPORAL_PATCH_SIZE, MERGE_SIZE = 16, 2, 2
MIN_PIXELS, MAX_PIXELS = 65536, 16777216
# The DROID client letterboxes to 180×320 (16:9 = 1.778); accept landscape frames near that ratio.
ASPECT_LO, ASPECT_HI = 1.686, 1.814


# ---- albumentations-style eval chain (GR00T ``use_albumentations=True``) -------------------------
def smallest_max_size(rgb: np.ndarray, max_size: int = SHORTEST_EDGE) -> np.ndarray:
    """``A.SmallestMaxSize(max_size, INTER_AREA)``: scale so the shortest edge is ``max_size``.

    Albumentations rounds each new side with Python 3 ``round`` (half to even) and leaves the frame
    untouched when the scale is exactly 1."""
    h, w = rgb.shape[:2]
    scale = max_size / float(min(h, w))
    if scale == 1.0:
        return rgb
    new_h, new_w = round(h * scale), round(w * scale)
    return cv2.resize(np.ascontiguousarray(rgb), (new_w, new_h), interpolation=cv2.INTER_AREA)


def fractional_center_crop(rgb: np.ndarray, fraction: float = CROP_FRACTION) -> np.ndarray:
    """GR00T's ``FractionalCenterCrop``: keep ``int(side · fraction)`` pixels per side.

    The offset floors ``(side − crop) // 2`` (455 → 432 starts at 11), unlike torchvision's
    ``center_crop``, which rounds half to even (N1.5's chain)."""
    h, w = rgb.shape[:2]
    ch, cw = int(h * fraction), int(w * fraction)
    top, left = (h - ch) // 2, (w - cw) // 2
    return np.ascontiguousarray(rgb[top:top + ch, left:left + cw])


def droid_frame(rgb: np.ndarray) -> np.ndarray:
    """One camera frame uint8 [H, W, 3] → the uint8 frame the Qwen processor receives."""
    return smallest_max_size(fractional_center_crop(smallest_max_size(rgb)))


# ---- Qwen3-VL image processor ---------------------------------------------------------------------
def smart_resize(height: int, width: int, factor: int = PATCH_SIZE * MERGE_SIZE,
                 min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """Qwen's target size: each side a multiple of ``factor`` (Python ``round``, half to even), the
    area brought inside [min_pixels, max_pixels] while keeping the aspect ratio. 256×455 → 256×448."""
    if max(height, width) / min(height, width) > 200:
        raise InputError("image", f"aspect ratio of {width}x{height} px exceeds 200 (Qwen's limit)")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def resize_bicubic_uint8(rgb: np.ndarray, height: int, width: int) -> torch.Tensor:
    """uint8 [H, W, 3] → uint8 [3, height, width], antialiased bicubic.

    The resize runs on the uint8 tensor, as the fast processor does, so overshoot is clamped and the
    result rounded before normalisation (a float resize differs by up to 0.09 after normalising). On
    CPU torchvision uses torch's native uint8 kernel; the float-then-round path it takes on GPU differs
    by one grey level on ~0.1 % of pixels, so keep this step on the host. The kernel reads the frame in
    its HWC order (a channels-last view: no transposed copy first) and computes the same integers."""
    chw = torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1)
    return TF.resize(chw, [height, width], interpolation=TF.InterpolationMode.BICUBIC, antialias=True)


def qwen_normalize(u8: torch.Tensor) -> torch.Tensor:
    """Rescale 1/255 fused with mean = std = 0.5, i.e. (u8 − 127.5) / 127.5 in float32 — the fast
    processor's fused form, bit-equal to it (the PIL processor's unfused x/255 then (x − 0.5)/0.5
    differs in the last bit)."""
    return (u8.to(torch.float32) - 127.5) / 127.5


def merge_order(x: torch.Tensor, patch_size: int = PATCH_SIZE, merge_size: int = MERGE_SIZE) -> torch.Tensor:
    """[C, H, W] → a view [gh/m, gw/m, m, m, C, p, p]: the patches in merge order (each 2×2 block of
    patches adjacent, blocks row-major), so the vision tower's patch merger can fold 4 consecutive rows
    into one token; inside a patch [C][py][px]."""
    c, h, w = x.shape
    gh, gw = h // patch_size, w // patch_size
    x = x.reshape(c, gh // merge_size, merge_size, patch_size, gw // merge_size, merge_size, patch_size)
    return x.permute(1, 4, 2, 5, 0, 3, 6)


def patchify(x: torch.Tensor, patch_size: int = PATCH_SIZE, temporal_patch_size: int = TEMPORAL_PATCH_SIZE,
             merge_size: int = MERGE_SIZE) -> torch.Tensor:
    """One still image [C, H, W] → [gh·gw, C·T·p·p] patches in ``merge_order``, the still image repeated
    over the ``temporal_patch_size`` time steps: each row is ordered [C][T][py][px]."""
    x = merge_order(x, patch_size, merge_size).unsqueeze(5)
    x = x.expand(-1, -1, -1, -1, -1, temporal_patch_size, -1, -1)  # [.., C, T, p, p]
    return x.reshape(-1, x.shape[4] * temporal_patch_size * patch_size * patch_size)


def qwen_pixel_values(frames: list[np.ndarray], patch_size: int = PATCH_SIZE,
                      temporal_patch_size: int = TEMPORAL_PATCH_SIZE,
                      merge_size: int = MERGE_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 frames [H, W, 3] (after ``droid_frame``, in the VLM's frame order) →
    (``pixel_values`` float32 [Σ gh·gw, 3·T·p·p], ``image_grid_thw`` int64 [N, 3]).

    ``patchify(qwen_normalize(resize))`` per frame, concatenated, computed as its cheaper equivalent: the
    resized frame is made contiguous in uint8 (the resize returns a channels-last view, whose 3-element
    pixel stride would make the patch copy a gather), normalised there by the same two float32 operations
    per value, and copied once in merge order into both time steps of one output buffer. Frames are filled
    side by side on the frame workers (``host_threads.frame_map``), each into its own rows."""
    sizes = [smart_resize(f.shape[0], f.shape[1], factor=patch_size * merge_size) for f in frames]
    counts = [(h // patch_size) * (w // patch_size) for h, w in sizes]
    starts = [sum(counts[:i]) for i in range(len(counts))]
    out = torch.empty(sum(counts), 3, temporal_patch_size, patch_size, patch_size)

    def fill(i: int) -> None:  # frame i's rows of ``out``: frames are independent (``frame_map``)
        (h, w), n, row = sizes[i], counts[i], starts[i]
        norm = resize_bicubic_uint8(frames[i], h, w).contiguous().to(torch.float32)
        norm.sub_(127.5).div_(127.5)  # == qwen_normalize, bit for bit: exact u8 → float, then the same two ops
        blocks = merge_order(norm, patch_size, merge_size).unsqueeze(5)  # [.., C, 1, p, p]
        out[row:row + n].view(*blocks.shape[:5], temporal_patch_size, patch_size, patch_size).copy_(
            blocks.expand(-1, -1, -1, -1, -1, temporal_patch_size, -1, -1))

    frame_map(fill, range(len(frames)))
    grids = torch.tensor([(1, h // patch_size, w // patch_size) for h, w in sizes], dtype=torch.int64)
    return out.view(len(out), -1), grids


def droid_patch_grid(height: int = 180, width: int = 320, patch_size: int = PATCH_SIZE,
                     merge_size: int = MERGE_SIZE) -> tuple[int, int, int]:
    """The [t, h, w] patch grid a frame of this size lands on through ``droid_frame`` and the smart resize
    (the DROID client's 180×320: (1, 16, 28)). A static-shape backend builds for it and refuses others."""
    h, w = droid_frame(np.zeros((height, width, 3), dtype=np.uint8)).shape[:2]
    rh, rw = smart_resize(h, w, factor=patch_size * merge_size)
    return 1, rh // patch_size, rw // patch_size


# ---- text and request checks --------------------------------------------------------------------
def formalize_language(text: str) -> str:
    """GR00T's ``formalize_language``: lower-case, then drop every character that is not a word
    character (Unicode letters, digits, ``_``) or whitespace. "Put the cup." → "put the cup"."""
    return re.sub(r"[^\w\s]", "", text.lower())


def frame_aspect_ok(h: int, w: int, lo: float = ASPECT_LO, hi: float = ASPECT_HI) -> bool:
    """Whether a frame is landscape near 16:9 (``lo ≤ w / h ≤ hi``), the shape the model saw: other
    ratios change the token count per frame (e.g. 256×256 gives 64 tokens, not 112)."""
    return h > 0 and lo <= w / h <= hi
