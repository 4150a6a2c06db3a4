# SPDX-License-Identifier: Apache-2.0
"""The N1.6 eval image chain (``use_albumentations = true``), as a short list of named pure steps.

Spec ``gr00t_n16.md`` §4.1–4.2. Per camera frame, uint8 [H, W, 3] RGB:

    shortest edge ``shortest_image_edge`` (INTER_AREA) → centre crop ``crop_fraction`` → shortest edge again
      → Eagle ``smart_resize`` (each side a multiple of 28 px) with PIL bicubic → (u8 − 127.5) / 127.5 → [3, H', W']

GR1 256×256 → 256×256 → 243×243 → 256×256 → 252×252 (18×18 patches, 81 tokens); a 180×320 camera → 256×455 →
243×432 → 256×455 → 252×448 (144 tokens). Every step follows NVIDIA's N1.6 release code (Isaac-GR00T at e29d8fc, the
commit the spec reads):

1–3. ``gr00t/model/gr00t_n1d6/image_augmentations.py::build_image_transformations_albumentations``, eval list:
   ``A.SmallestMaxSize(shortest_image_edge, cv2.INTER_AREA)``, ``FractionalCenterCrop(crop_fraction)``,
   ``A.SmallestMaxSize`` again. These are the same operations as N1.7's DROID chain, so ``preprocessing_n17``'s
   ``smallest_max_size`` and ``fractional_center_crop`` do them (no LetterBoxPad: the checkpoints predate it).
4. ``gr00t/model/gr00t_n1d6/processing_gr00t_n1d6.py::_apply_vlm_processing`` hands the uint8 frame to the Eagle
   processor as a PIL RGB image; the collator's ``process_vision_info`` runs the vendored
   ``Eagle-Block2A-2B-v2/processing_eagle3_vl.py::fetch_image``: ``smart_resize`` (factor 28 = patch 14 × unshuffle
   2; sides rounded half to even and clamped to [28, 7000], then the area brought into [4, 4096] × 28² px) and
   ``image.resize((w', h'))``, whose filter is Pillow's default for RGB, BICUBIC — done here by Pillow itself.
5. ``Eagle-Block2A-2B-v2/image_processing_eagle3_vl_fast.py`` (``do_resize`` false): rescale 1/255 fused with mean =
   std = 0.5 by transformers' fast base processor, i.e. ``(x − 127.5) / 127.5`` in float32 (``preprocessing_n15``'s
   ``eagle_normalize``, the same Eagle normalisation). Each image stays its own [3, H', W'] tensor.

Ambiguities settled from NVIDIA's code (the spec states the steps, not these details):

* The snap's area cap scales the *snapped* sides (``h_bar / beta``, floored), not the input sides as Qwen's
  ``smart_resize`` does; the floor ``max(28, ·)`` and the 7000 px clamp come before the area test. The lower bound
  scales the input sides (``ceil(h · beta)``). All from ``processing_eagle3_vl.py``.
* The resize filter is named nowhere: ``fetch_image`` passes none, and Pillow's documented default for RGB is
  BICUBIC (Pillow ≥ 7); Pillow returns a copy when the size is unchanged, so does this chain.
* Frame order (§4.1, ``processing_gr00t_n1d6.py::_get_vlm_inputs``): time-major, view-minor over the modality
  config's camera order (``vlm_frame_order``). NVIDIA's e29d8fc stacks the views, so they must share one size there;
  its later fix (``processing_gr00t_n1d6.py@005e8a4f``) passes a list. Views of different sizes are accepted here,
  each snapped on its own, which is what that fix computes for the one frame per view every known tag takes.

Images under 224 px: the chain first brings every frame's short side to ``shortest_image_edge``, so with the
released 256 no image reaches the tower under 252 px, however small the camera (a 16×16 frame is upscaled by
INTER_AREA and gives 252×252). Only a config with ``shortest_image_edge`` under 210 can give sides under 224 px
(fewer than 16 patches; 200 → 196×196): the pixels are still exactly NVIDIA's, and the position-grid resize is the
tower's concern (spec §12 item 7).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from .configs_n16 import Eagle3Config, Gr00tN16ProcessorConfig
from .errors import ConfigError, InputError
from .preprocessing_n15 import eagle_normalize
from .preprocessing_n17 import fractional_center_crop, smallest_max_size

# Vendored in Eagle-Block2A-2B-v2/processing_eagle3_vl.py (no checkpoint file carries them).
EAGLE_MIN_PIXELS = 4 * 28 * 28
EAGLE_MAX_PIXELS = 4096 * 28 * 28
EAGLE_MAX_SIDE = 500 * 14  # IMAGE_MAX_SIZE: each snapped side is clamped to 7000 px
EAGLE_MAX_RATIO = 200


# ---- the chain, step by step --------------------------------------------------------------------------------------
def check_frame(rgb: object, field: str) -> np.ndarray:
    """Refuse anything but a uint8 [H, W, 3] RGB array with both sides ≥ 1 px."""
    if not isinstance(rgb, np.ndarray):
        raise InputError(field, f"must be a uint8 [H, W, 3] RGB numpy array, got {type(rgb).__name__}")
    if rgb.dtype != np.uint8:
        raise InputError(field, f"must be uint8 (0-255 RGB), got dtype {rgb.dtype}")
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise InputError(field, f"must have shape [H, W, 3] (RGB, channels last), got {list(rgb.shape)}")
    if rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise InputError(field, f"is empty ({rgb.shape[1]}x{rgb.shape[0]} px)")
    return rgb


def albumentations_eval(rgb: np.ndarray, shortest_edge: int, crop_fraction: float) -> np.ndarray:
    """Steps 1–3: uint8 [H, W, 3] → the uint8 [h, w, 3] frame the Eagle processor receives (short side
    ``shortest_edge``)."""
    x = fractional_center_crop(smallest_max_size(rgb, shortest_edge), crop_fraction)
    return smallest_max_size(x, shortest_edge)


def eagle_smart_resize(height: int, width: int, factor: int, field: str = "image") -> tuple[int, int]:
    """Step 4's target size, NVIDIA's ``processing_eagle3_vl.smart_resize``: each side rounded (half to even) to a
    multiple of ``factor``, clamped to [factor, 7000]; an area over 4096·28² scales the snapped sides down by √ and
    floors, one under 4·28² scales the input sides up and ceils. 256×256 → 252×252, 256×455 → 252×448."""
    if max(height, width) / min(height, width) > EAGLE_MAX_RATIO:
        raise InputError(field, f"aspect ratio of {width}x{height} px exceeds {EAGLE_MAX_RATIO} (Eagle's limit)")
    h_bar = min(max(factor, round(height / factor) * factor), EAGLE_MAX_SIDE)
    w_bar = min(max(factor, round(width / factor) * factor), EAGLE_MAX_SIDE)
    if h_bar * w_bar > EAGLE_MAX_PIXELS:
        beta = math.sqrt((h_bar * w_bar) / EAGLE_MAX_PIXELS)
        h_bar = math.floor(h_bar / beta / factor) * factor
        w_bar = math.floor(w_bar / beta / factor) * factor
    elif h_bar * w_bar < EAGLE_MIN_PIXELS:
        beta = math.sqrt(EAGLE_MIN_PIXELS / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def pil_bicubic(rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    """Step 4's resize: ``PIL.Image.resize((width, height))`` with Pillow's RGB default BICUBIC (antialiased: the
    kernel widens with the downscale factor); a copy when the size is unchanged, as Pillow returns."""
    if rgb.shape[:2] == (height, width):
        return rgb.copy()
    image = Image.fromarray(np.ascontiguousarray(rgb))  # uint8 [H, W, 3] is mode RGB
    return np.array(image.resize((width, height), Image.Resampling.BICUBIC))  # a writable copy


def to_pixel_values(rgb: np.ndarray) -> torch.Tensor:
    """Step 5: uint8 [H', W', 3] → float32 [3, H', W'], (x − 127.5) / 127.5."""
    return eagle_normalize(torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1))


def vlm_frame_order(frames_per_view: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """§4.1: the frames of each view (modality-key order, T each) → one list, time-major, view-minor."""
    counts = {len(v) for v in frames_per_view}
    if len(counts) > 1:
        raise InputError("images", f"every camera must give the same number of frames, got {sorted(counts)}")
    steps = counts.pop() if counts else 0
    return [view[t] for t in range(steps) for view in frames_per_view]


def _check_aspect(height: int, width: int, field: str) -> None:
    # Steps 1-3 lower the aspect ratio by less than 2 for any valid config, so beyond 202 the snap would refuse the
    # frame anyway: refuse it before its short side is upscaled (a 1×200 frame would become 256×51200).
    if max(height, width) / min(height, width) > EAGLE_MAX_RATIO + 2:
        raise InputError(field, f"aspect ratio of {width}x{height} px exceeds {EAGLE_MAX_RATIO} (Eagle's limit)")


# ---- the chain as the checkpoint configures it --------------------------------------------------------------------
@dataclass(frozen=True)
class N16ImageChain:
    """Steps 1–5 with the values of one checkpoint: ``shortest_image_edge`` and ``crop_fraction`` from its
    ``processor_config.json``, the snapping factor from the backbone (patch × unshuffle)."""

    shortest_edge: int
    crop_fraction: float
    factor: int

    def __post_init__(self) -> None:
        if isinstance(self.shortest_edge, bool) or not isinstance(self.shortest_edge, int) or self.shortest_edge < 1:
            raise ConfigError(f"shortest_image_edge must be a positive integer, got {self.shortest_edge!r}")
        if isinstance(self.crop_fraction, bool) or not isinstance(self.crop_fraction, (int, float)) or not (
                0.0 < self.crop_fraction <= 1.0):  # NVIDIA's FractionalCenterCrop refuses the same
            raise ConfigError(f"crop_fraction must be in (0, 1], got {self.crop_fraction!r}")
        if int(self.shortest_edge * self.crop_fraction) < 1:
            raise ConfigError(f"shortest_image_edge {self.shortest_edge} x crop_fraction {self.crop_fraction} "
                              "crops every frame to nothing")
        if self.factor < 1:
            raise ConfigError(f"the image factor must be positive, got {self.factor}")

    @classmethod
    def from_configs(cls, processor: Gr00tN16ProcessorConfig, backbone: Eagle3Config) -> "N16ImageChain":
        if not processor.use_albumentations:
            raise ConfigError("processor_config.json: use_albumentations=false (the torchvision letterbox chain) is "
                              "not supported; every released N1.6 checkpoint uses the albumentations chain")
        return cls(processor.shortest_image_edge, processor.crop_fraction, backbone.image_factor)

    def eagle_frame(self, rgb: np.ndarray, field: str = "image") -> np.ndarray:
        """Steps 1–4: uint8 [H, W, 3] → uint8 [H', W', 3], H' and W' multiples of ``factor``."""
        _check_aspect(*check_frame(rgb, field).shape[:2], field)
        x = albumentations_eval(rgb, self.shortest_edge, self.crop_fraction)
        return pil_bicubic(x, *eagle_smart_resize(x.shape[0], x.shape[1], self.factor, field))

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """(H', W') a frame of this size lands on (GR1 256×256: 252×252); tokens = H'·W' / factor²."""
        _check_aspect(height, width, "image")
        x = albumentations_eval(np.zeros((height, width, 3), np.uint8), self.shortest_edge, self.crop_fraction)
        return eagle_smart_resize(x.shape[0], x.shape[1], self.factor)

    def __call__(self, frames: Sequence[np.ndarray], cameras: Sequence[str] | None = None) -> list[torch.Tensor]:
        """Frames in the VLM's order (one per camera for every known tag: the modality config's camera order;
        ``vlm_frame_order`` for T > 1) → the float32 [3, H', W'] tensors the vision tower takes, in that order.
        ``cameras`` names the frames in errors (``images.<camera>``)."""
        if cameras is not None and len(cameras) != len(frames):
            raise InputError("images", f"{len(frames)} frame(s) for {len(cameras)} camera name(s)")
        fields = [f"images.{c}" for c in cameras] if cameras is not None else [f"images[{i}]" for i in
                                                                               range(len(frames))]
        return [to_pixel_values(self.eagle_frame(f, field)) for f, field in zip(frames, fields)]


def n16_pixel_values(frames: Sequence[np.ndarray], processor: Gr00tN16ProcessorConfig, backbone: Eagle3Config,
                     cameras: Sequence[str] | None = None) -> list[torch.Tensor]:
    """One call of the whole chain with a checkpoint's configs (see ``N16ImageChain.__call__``)."""
    return N16ImageChain.from_configs(processor, backbone)(frames, cameras)
