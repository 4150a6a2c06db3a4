# SPDX-License-Identifier: Apache-2.0
"""The N1.7 DROID image chain: its geometry follows GR00T's albumentations eval transforms, and its
Qwen steps equal transformers' own Qwen3-VL image processor bit for bit."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
from models.experimental.gr00t.common import host_threads
from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.preprocessing_n17 import (
    droid_frame,
    formalize_language,
    fractional_center_crop,
    frame_aspect_ok,
    qwen_pixel_values,
    smallest_max_size,
    smart_resize,
)
from PIL import Image
from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize_pil
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as hf_smart_resize

from ..conftest import make_frame

# Qwen3-VL-2B-Instruct's preprocessor_config.json values, given to transformers' processors directly.
QWEN3_VL_KWARGS = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5] * 3,
                   "image_std": [0.5] * 3, "min_pixels": 65536, "max_pixels": 16777216, "do_resize": True}


def coordinate_frame(h: int, w: int) -> np.ndarray:
    """uint8 frame whose pixel (y, x) holds (y mod 256, x mod 256, (y + x) mod 256)."""
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([yy % 256, xx % 256, (yy + xx) % 256], axis=-1).astype(np.uint8)


def droid_frames(n: int = 4, size: tuple[int, int] = (180, 320)) -> list[np.ndarray]:
    return [droid_frame(make_frame(seed, size)) for seed in range(n)]


# ---- albumentations-style chain ------------------------------------------------------------------
@pytest.mark.parametrize(
    "size, resized, cropped, final",
    [((180, 320), (256, 455), (243, 432), (256, 455)),
     ((720, 1280), (256, 455), (243, 432), (256, 455)),
     ((256, 256), (256, 256), (243, 243), (256, 256)),
     ((170, 300), (256, 452), (243, 429), (256, 452))],  # 451.76 → 452: rounded, not truncated
    ids=["droid_180x320", "hd_720x1280", "square_256", "rounding_170x300"],
)
def test_droid_frame_sizes_follow_the_spec(size, resized, cropped, final):
    rgb = make_frame(0, size)
    step1 = smallest_max_size(rgb)
    step2 = fractional_center_crop(step1)
    out = droid_frame(rgb)
    assert step1.shape == (*resized, 3) and step2.shape == (*cropped, 3)
    assert out.shape == (*final, 3) and out.dtype == np.uint8


def test_shortest_edge_256_is_left_untouched():
    rgb = make_frame(1, (256, 455))
    assert smallest_max_size(rgb) is rgb  # albumentations skips the resize at scale 1, no INTER_AREA pass


@pytest.mark.parametrize("size, offset", [((256, 455), (6, 11)), ((256, 256), (6, 6)), ((257, 301), (6, 8))],
                         ids=["droid_256x455", "square_256", "odd_257x301"])
def test_centre_crop_keeps_int_095_with_floored_offsets(size, offset):
    h, w = size
    crop = fractional_center_crop(coordinate_frame(h, w))
    # 256 → 243 leaves 13: floor(6.5) = 6 (torchvision's half-to-even centre crop would also give 6,
    # but 455 → 432 leaves 23: floor gives 11 where round(11.5) gives 12)
    assert crop.shape[:2] == (int(h * 0.95), int(w * 0.95))
    assert tuple(crop[0, 0, :2]) == offset
    assert tuple(crop[-1, -1, :2]) == ((offset[0] + crop.shape[0] - 1) % 256, (offset[1] + crop.shape[1] - 1) % 256)


def test_area_downscale_by_two_is_the_2x2_block_mean():
    # Independent of OpenCV: at an integer factor INTER_AREA is the block mean, rounded half up.
    rgb = make_frame(7, (512, 1024))
    out = smallest_max_size(rgb).astype(np.int64)
    block_sum = rgb.reshape(256, 2, 512, 2, 3).astype(np.int64).sum(axis=(1, 3))
    assert out.shape == (256, 512, 3)
    np.testing.assert_array_equal(out, (block_sum + 2) // 4)


def test_droid_frame_is_the_three_steps_with_opencv_area_resizes():
    rgb = make_frame(3, (180, 320))
    x = cv2.resize(rgb, (455, 256), interpolation=cv2.INTER_AREA)
    x = np.ascontiguousarray(x[6:6 + 243, 11:11 + 432])
    x = cv2.resize(x, (455, 256), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(droid_frame(rgb), x)


# ---- Qwen3-VL image processor --------------------------------------------------------------------
def test_transformers_maps_qwen3_vl_to_the_processors_compared_here():
    assert IMAGE_PROCESSOR_MAPPING_NAMES["qwen3_vl"] == {"torchvision": "Qwen2VLImageProcessor",
                                                         "pil": "Qwen2VLImageProcessorPil"}


SMART_SIZES = [(256, 455), (256, 256), (243, 432), (180, 320), (100, 100), (50, 9000), (4000, 4100),
               (4096, 4096), (48, 48), (300, 17), (1000, 7), (16, 3000), (255, 257)]


@pytest.mark.parametrize("size", SMART_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_smart_resize_equals_transformers(size):
    ours = smart_resize(*size)
    assert ours == hf_smart_resize(*size, factor=32, min_pixels=65536, max_pixels=16777216)
    assert ours == hf_smart_resize_pil(*size, factor=32, min_pixels=65536, max_pixels=16777216)
    assert ours[0] % 32 == 0 and ours[1] % 32 == 0


def test_smart_resize_droid_and_square_targets():
    assert smart_resize(256, 455) == (256, 448)
    assert smart_resize(256, 256) == (256, 256)
    assert smart_resize(100, 100) == (256, 256)  # below min_pixels: scaled up, ceil to 32


def test_smart_resize_refuses_extreme_aspect_ratios():
    with pytest.raises(InputError, match="aspect ratio"):
        smart_resize(10, 2010)


def test_droid_pixel_values_equal_the_fast_processor_bit_for_bit():
    frames = droid_frames(4)
    pixel_values, grid = qwen_pixel_values(frames)
    # GR00T hands the processor PIL images; transformers converts them to uint8 tensors itself.
    theirs = Qwen2VLImageProcessor(**QWEN3_VL_KWARGS)(images=[Image.fromarray(f) for f in frames], return_tensors="pt")
    assert pixel_values.shape == (1792, 1536) and pixel_values.dtype == torch.float32
    assert grid.tolist() == [[1, 16, 28]] * 4 and grid.dtype == torch.int64
    assert torch.equal(grid, theirs["image_grid_thw"])
    assert torch.equal(pixel_values, theirs["pixel_values"])


def test_square_and_mixed_frames_equal_the_fast_processor_bit_for_bit():
    frames = [droid_frame(make_frame(9, (256, 256))), *droid_frames(1), droid_frame(make_frame(8, (256, 256)))]
    pixel_values, grid = qwen_pixel_values(frames)
    theirs = Qwen2VLImageProcessor(**QWEN3_VL_KWARGS)(images=frames, return_tensors="pt")
    assert grid.tolist() == [[1, 16, 16], [1, 16, 28], [1, 16, 16]]
    assert pixel_values.shape == (256 + 448 + 256, 1536)
    assert torch.equal(grid, theirs["image_grid_thw"])
    assert torch.equal(pixel_values, theirs["pixel_values"])  # frame order survives transformers' grouping


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_pixel_values_on_any_number_of_frame_workers_equal_the_fast_processor(workers):
    """The frames are filled side by side (``host_threads.frame_map``); one worker is the plain loop."""
    frames = [*droid_frames(2), droid_frame(make_frame(9, (256, 256))), *droid_frames(1)]
    before = host_threads.frame_workers()
    host_threads.set_frame_workers(workers)
    try:
        pixel_values, grid = qwen_pixel_values(frames)
    finally:
        host_threads.set_frame_workers(before)
    theirs = Qwen2VLImageProcessor(**QWEN3_VL_KWARGS)(images=frames, return_tensors="pt")
    assert torch.equal(grid, theirs["image_grid_thw"])
    assert torch.equal(pixel_values, theirs["pixel_values"])


def test_pil_processor_differs_by_at_most_one_grey_level():
    # Not what we reproduce: PIL's bicubic differs from torch's on ~0.1 % of values by one uint8
    # level (2/255 after normalising), and its unfused x/255 then (x − 0.5)/0.5 by float rounding.
    frames = droid_frames(4)
    ours, grid = qwen_pixel_values(frames)
    theirs = Qwen2VLImageProcessorPil(**QWEN3_VL_KWARGS)(images=[Image.fromarray(f) for f in frames],
                                                         return_tensors="pt")
    assert torch.equal(grid, theirs["image_grid_thw"])
    diff = (ours.double() - theirs["pixel_values"].double()).abs()
    assert diff.max().item() <= 2 / 255 + 1e-6
    assert (diff > 1e-3).double().mean().item() < 0.01


def test_resize_happens_on_uint8_before_normalising():
    pixel_values, _ = qwen_pixel_values(droid_frames(1))
    grey = pixel_values * 127.5 + 127.5
    assert torch.equal(grey, grey.round()) and grey.min() >= 0 and grey.max() <= 255


def test_patch_rows_are_in_merge_order_with_channel_time_y_x_inside():
    # Patch (gy, gx) of a frame gw patches wide goes to row ((gy//2)·(gw//2) + gx//2)·4 + (gy%2)·2 + gx%2.
    frame = coordinate_frame(256, 256)
    pixel_values, grid = qwen_pixel_values([frame])
    grey = (pixel_values * 127.5 + 127.5).round().to(torch.int64).view(-1, 3, 2, 16, 16)  # [row, C, T, py, px]
    assert grid.tolist() == [[1, 16, 16]]
    assert torch.equal(grey[:, :, 0], grey[:, :, 1])  # the still image repeated over both time steps
    gw = 16
    for gy, gx in [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (2, 0), (5, 9), (15, 15)]:
        row = ((gy // 2) * (gw // 2) + gx // 2) * 4 + (gy % 2) * 2 + gx % 2
        patch = grey[row, :, 0]
        assert patch[0, 3, 5].item() == gy * 16 + 3 and patch[1, 3, 5].item() == gx * 16 + 5


# ---- text and frame checks -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [("Put the blue block in the green bowl", "put the blue block in the green bowl"),
     ("Pick up the can!!", "pick up the can"),
     ("Don't knock over the cup, please.", "dont knock over the cup please"),
     ("move_left 3 cm\tthen stop", "move_left 3 cm\tthen stop"),
     ("Café: déjà-vu (2x)", "café déjàvu 2x"),
     ("?!.", "")],
    ids=["demo", "exclamation", "apostrophe_comma", "underscore_digits_tab", "unicode_letters", "only_punctuation"],
)
def test_formalize_language_lowercases_and_drops_punctuation(text, expected):
    assert formalize_language(text) == expected


@pytest.mark.parametrize(
    "size, ok",
    [((180, 320), True), ((720, 1280), True), ((256, 455), True), ((256, 256), False), ((480, 640), False),
     ((320, 180), False), ((100, 168), False), ((100, 169), True), ((100, 181), True), ((100, 182), False)],
    ids=lambda v: f"{v[0]}x{v[1]}" if isinstance(v, tuple) else str(v),
)
def test_frame_aspect_accepts_landscape_near_16_by_9(size, ok):
    assert frame_aspect_ok(*size) is ok
