# SPDX-License-Identifier: Apache-2.0
"""The N1.6 image chain against independent implementations: OpenCV's INTER_AREA and plain slicing for the
albumentations steps, Pillow's resampling algorithm written out in numpy for the Eagle snap (bit for bit),
torchvision's antialiased bicubic (within one grey level), transformers' fused rescale-normalise and its
``smart_resize`` (factor 28); then the snapping rule's edges, small images and refusals."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
import torch
from models.experimental.gr00t.common.configs_n16 import Eagle3Config, Gr00tN16Config, Gr00tN16ProcessorConfig
from models.experimental.gr00t.common.errors import ConfigError, InputError
from models.experimental.gr00t.common.preprocessing_n16 import (
    N16ImageChain,
    albumentations_eval,
    eagle_smart_resize,
    n16_pixel_values,
    pil_bicubic,
    to_pixel_values,
    vlm_frame_order,
)
from PIL import Image
from torchvision.transforms.v2 import functional as TF
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as hf_smart_resize
from transformers.models.siglip.image_processing_siglip import SiglipImageProcessor

from ..conftest import make_frame

CHAIN = N16ImageChain.from_configs(Gr00tN16ProcessorConfig(), Eagle3Config())  # the released values: 256, 0.95, 28
EAGLE_MIN, EAGLE_MAX = 4 * 28 * 28, 4096 * 28 * 28


# ---- independent implementations ------------------------------------------------------------------------------------
def _bicubic(x: float) -> float:  # Pillow's bicubic_filter, a = -0.5
    a, x = -0.5, abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def _pillow_coeffs(in_size: int, out_size: int) -> list[tuple[int, np.ndarray]]:
    """Pillow's ``precompute_coeffs`` + ``normalize_coeffs_8bpc`` (libImaging/Resample.c): per output pixel, the
    first input index and the 22-bit fixed-point weights."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support, ss = 2.0 * filterscale, 1.0 / filterscale
    rows = []
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        w = [_bicubic((x + xmin - center + 0.5) * ss) for x in range(xmax)]
        total = 0.0
        for v in w:  # summed in order, as the C loop does
            total += v
        w = [v / total for v in w] if total != 0.0 else w
        k = np.array([math.trunc(-0.5 + v * (1 << 22)) if v < 0 else math.trunc(0.5 + v * (1 << 22)) for v in w])
        rows.append((xmin, k.astype(np.int64)))
    return rows


def _pillow_pass(x: np.ndarray, out_size: int, axis: int) -> np.ndarray:
    rows = _pillow_coeffs(x.shape[axis], out_size)
    x = np.moveaxis(x.astype(np.int64), axis, 0)
    out = []
    for xmin, k in rows:
        acc = (1 << 21) + np.tensordot(k, x[xmin:xmin + len(k)], axes=([0], [0]))
        out.append(np.clip(acc >> 22, 0, 255))  # clip8: floor(acc / 2^22) clamped
    return np.stack(out, axis=axis).astype(np.uint8)


def pillow_bicubic_reference(rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    """``Image.resize(BICUBIC)`` of an RGB image, written from Pillow's algorithm: horizontal pass first, uint8
    between the passes, a pass skipped when its side does not change."""
    x = rgb
    if width != x.shape[1]:
        x = _pillow_pass(x, width, axis=1)
    if height != x.shape[0]:
        x = _pillow_pass(x, height, axis=0)
    return x


def opencv_albumentations_eval(rgb: np.ndarray, resized: tuple[int, int], crop: tuple[int, int],
                               offset: tuple[int, int], final: tuple[int, int]) -> np.ndarray:
    """Steps 1–3 with the sizes and offsets written out: OpenCV INTER_AREA (what ``A.SmallestMaxSize`` calls, skipped
    at scale 1) and a slice (``FractionalCenterCrop``)."""
    x = rgb if rgb.shape[:2] == resized else cv2.resize(rgb, resized[::-1], interpolation=cv2.INTER_AREA)
    x = np.ascontiguousarray(x[offset[0]:offset[0] + crop[0], offset[1]:offset[1] + crop[1]])
    return x if x.shape[:2] == final else cv2.resize(x, final[::-1], interpolation=cv2.INTER_AREA)


def transformers_normalise(u8: np.ndarray) -> torch.Tensor:
    """transformers' torchvision-backend image processor with the Eagle values (no resize, rescale 1/255, mean = std
    = 0.5): the fused normalisation NVIDIA's ``Eagle3_VLImageProcessorFast`` inherits."""
    proc = SiglipImageProcessor(do_resize=False, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return proc(images=[Image.fromarray(u8)], return_tensors="pt")["pixel_values"][0]


# (H, W) in → after SmallestMaxSize, crop, offset, SmallestMaxSize, Eagle snap.
GEOMETRY = [
    ((256, 256), (256, 256), (243, 243), (6, 6), (256, 256), (252, 252)),  # GR1 / bridge
    ((180, 320), (256, 455), (243, 432), (6, 11), (256, 455), (252, 448)),  # a wide 320×180 camera
    ((320, 180), (455, 256), (432, 243), (11, 6), (455, 256), (448, 252)),  # the same, portrait
    ((480, 640), (256, 341), (243, 323), (6, 9), (256, 340), (252, 336)),
    ((720, 1280), (256, 455), (243, 432), (6, 11), (256, 455), (252, 448)),
    ((225, 301), (256, 342), (243, 324), (6, 9), (256, 341), (252, 336)),
    ((16, 16), (256, 256), (243, 243), (6, 6), (256, 256), (252, 252)),  # tiny: upscaled first
]
GEOMETRY_IDS = [f"{g[0][0]}x{g[0][1]}" for g in GEOMETRY]


# ---- the chain against the independent implementations -------------------------------------------------------------
@pytest.mark.parametrize("size, resized, crop, offset, final, snapped", GEOMETRY, ids=GEOMETRY_IDS)
def test_pixel_values_equal_the_independent_chain_bit_for_bit(size, resized, crop, offset, final, snapped):
    rgb = make_frame(3, size)
    theirs_u8 = opencv_albumentations_eval(rgb, resized, crop, offset, final)
    assert np.array_equal(albumentations_eval(rgb, 256, 0.95), theirs_u8)
    theirs = pillow_bicubic_reference(theirs_u8, *snapped)
    expected = TF.normalize(torch.from_numpy(theirs).permute(2, 0, 1).to(torch.float32), [127.5] * 3, [127.5] * 3)
    (ours,) = CHAIN([rgb])
    assert ours.shape == (3, *snapped) and ours.dtype == torch.float32
    assert snapped[0] % 28 == 0 and snapped[1] % 28 == 0 and CHAIN.output_size(*size) == snapped
    assert torch.equal(ours, expected)  # measured max |diff| 0


@pytest.mark.parametrize("src, dst", [((256, 256), (252, 252)), ((256, 455), (252, 448)), ((256, 341), (252, 336)),
                                      ((256, 7686), (252, 7000)), ((64, 64), (168, 140)), ((256, 256), (256, 252))],
                         ids=["gr1", "wide", "vga", "clamped_7000", "upscale", "width_only"])
def test_snap_resize_is_pillows_bicubic_bit_for_bit(src, dst):
    rgb = make_frame(5, src)
    ours = pil_bicubic(rgb, *dst)
    assert ours.shape == (*dst, 3) and ours.dtype == np.uint8
    assert np.array_equal(ours, pillow_bicubic_reference(rgb, *dst))
    assert np.array_equal(ours, np.asarray(Image.fromarray(rgb).resize(dst[::-1])))  # Pillow's default filter for RGB


def test_unchanged_size_is_a_copy_like_pillow():
    rgb = make_frame(6, (252, 448))
    out = pil_bicubic(rgb, 252, 448)
    assert out is not rgb and np.array_equal(out, rgb)


@pytest.mark.parametrize("size, snapped", [((256, 256), (252, 252)), ((256, 455), (252, 448)),
                                           ((256, 340), (252, 336))], ids=["gr1", "wide", "vga"])
def test_torchvision_antialiased_bicubic_is_within_one_grey_level(size, snapped):
    # Not what NVIDIA runs (Pillow is), but an independent kernel: torch's uint8 antialiased bicubic.
    rgb = make_frame(7, size)
    ours = to_pixel_values(pil_bicubic(rgb, *snapped))
    tv = TF.resize(torch.from_numpy(rgb).permute(2, 0, 1), list(snapped), interpolation=TF.InterpolationMode.BICUBIC,
                   antialias=True)
    diff = (ours - to_pixel_values(tv.permute(1, 2, 0).numpy())).abs()
    assert diff.max().item() <= 2 / 255 + 1e-6  # measured: one grey level (2/255 after normalising)
    assert (diff > 1e-3).double().mean().item() < 0.01  # on ~0.2 % of values


@pytest.mark.parametrize("size", [(252, 252), (252, 448), (28, 7000)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_normalisation_equals_transformers_fused_rescale_and_normalise(size):
    u8 = make_frame(8, size)
    ours = to_pixel_values(u8)
    assert torch.equal(ours, transformers_normalise(u8))
    assert torch.equal(ours * 127.5 + 127.5, torch.from_numpy(u8).permute(2, 0, 1).to(torch.float32))


# ---- the snapping rule --------------------------------------------------------------------------------------------
PLAIN_SIZES = [(256, 256), (256, 455), (243, 432), (252, 448), (251, 253), (265, 266), (238, 238), (280, 300),
               (1000, 1500), (60, 60), (30, 500), (20, 20)]


@pytest.mark.parametrize("size", PLAIN_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snap_equals_transformers_smart_resize_where_the_rules_agree(size):
    # Qwen's rule (transformers) and Eagle's differ only at the 7000 px clamp, the factor floor and the area cap.
    assert eagle_smart_resize(*size, 28) == hf_smart_resize(*size, factor=28, min_pixels=EAGLE_MIN,
                                                            max_pixels=EAGLE_MAX)


@pytest.mark.parametrize("side, snapped", [(251, 252), (252, 252), (253, 252), (265, 252), (266, 280), (267, 280),
                                           (237, 224), (238, 224), (239, 252), (294, 280), (295, 308)])
def test_snap_rounds_each_side_half_to_even(side, snapped):
    # 238 / 28 = 8.5 → 8 and 266 / 28 = 9.5 → 10 (Python's round); 294 / 28 = 10.5 → 10
    assert eagle_smart_resize(side, 280, 28) == (snapped, 280)


@pytest.mark.parametrize(
    "size, snapped",
    [((256, 7686), (252, 7000)),  # clamped to 7000 px: the aspect ratio is not kept
     ((7000, 7000), (1792, 1792)),  # 7000² > 4096·28²: β = 7000/1792 exactly, 4096 tokens
     ((8000, 9000), (1792, 1792)),  # both clamped to 7000 first, then the same cap
     ((14, 2800), (28, 2800)),  # the 28 px floor lifts the area over 4·28² (Qwen's rule would give 28×308)
     ((1, 100), (28, 112)),  # the floor makes the area exactly 4·28²: no upscale (Qwen's: 28×560)
     ((20, 20), (56, 56)), ((10, 10), (56, 56)), ((1, 1), (56, 56)),  # under 4·28²: scaled up and ceiled
     ((40, 50), (56, 84))],  # 28×56 → β = √(3136/2000): ceil(1.79), ceil(2.24)
    ids=["clamp_7000", "area_cap", "clamp_then_cap", "floor_28", "floor_28_at_min", "tiny_20", "tiny_10", "one_pixel",
         "small_40x50"])
def test_snap_edges_follow_eagles_rule(size, snapped):
    assert eagle_smart_resize(*size, 28) == snapped


def test_snap_refuses_an_aspect_ratio_over_200():
    assert eagle_smart_resize(2, 400, 28) == (28, 392)  # exactly 200 passes
    with pytest.raises(InputError, match="aspect ratio of 401x2 px exceeds 200"):
        eagle_smart_resize(2, 401, 28)


# ---- small images and other configs --------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [(16, 16), (1, 1), (2, 3), (40, 300), (200, 200), (223, 223)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_frames_under_224_px_reach_the_tower_at_252_px_with_the_released_config(size):
    # Steps 1-3 bring the short side to 256 first (INTER_AREA upscales), so the tower never sees under 252 px.
    (out,) = CHAIN([make_frame(9, size)])
    assert min(out.shape[1:]) == 252 and out.shape[1] % 28 == 0 and out.shape[2] % 28 == 0


def test_a_config_with_a_short_edge_under_210_gives_images_under_224_px():
    # shortest_image_edge 200: 200 → crop 190 → 200 → 196 (7·28): a 14×14 patch grid, under the 16×16 position grid.
    chain = N16ImageChain.from_configs(Gr00tN16ProcessorConfig(shortest_image_edge=200), Eagle3Config())
    rgb = make_frame(10, (256, 256))
    (out,) = chain([rgb])
    assert out.shape == (3, 196, 196) and chain.output_size(256, 256) == (196, 196)
    u8 = opencv_albumentations_eval(rgb, (200, 200), (190, 190), (5, 5), (200, 200))
    assert torch.equal(out, transformers_normalise(pillow_bicubic_reference(u8, 196, 196)))


def test_every_value_comes_from_the_configs():
    processor = Gr00tN16ProcessorConfig(shortest_image_edge=300, crop_fraction=0.8)
    chain = N16ImageChain.from_configs(processor, Gr00tN16Config.tiny().backbone)
    assert (chain.shortest_edge, chain.crop_fraction, chain.factor) == (300, 0.8, 28)
    rgb = make_frame(11, (180, 320))
    # 180×320 → 300×533 → crop 240×426 at (30, 53) → 300×532 → 308×532
    u8 = opencv_albumentations_eval(rgb, (300, 533), (240, 426), (30, 53), (300, 532))
    (ours,) = n16_pixel_values([rgb], processor, Gr00tN16Config.tiny().backbone)
    assert torch.equal(ours, transformers_normalise(pillow_bicubic_reference(u8, 308, 532)))


def test_cameras_of_different_sizes_keep_their_order_and_sizes():
    frames = [make_frame(12, (256, 256)), make_frame(13, (180, 320)), make_frame(14, (480, 640))]
    out = CHAIN(frames, cameras=["a", "b", "c"])
    assert [tuple(t.shape[1:]) for t in out] == [(252, 252), (252, 448), (252, 336)]
    assert all(torch.equal(o, CHAIN([f])[0]) for o, f in zip(out, frames))


def test_frame_order_is_time_major_view_minor():
    views = [["a0", "a1"], ["b0", "b1"], ["c0", "c1"]]  # 3 cameras × T = 2
    assert vlm_frame_order(views) == ["a0", "b0", "c0", "a1", "b1", "c1"]
    assert vlm_frame_order([["a0"], ["b0"]]) == ["a0", "b0"]  # T = 1: the modality config's camera order
    with pytest.raises(InputError, match="same number of frames"):
        vlm_frame_order([["a0", "a1"], ["b0"]])


def test_non_contiguous_frames_give_the_same_pixels():
    rgb = make_frame(15, (256, 512))
    view = rgb[:, ::2]  # strided view, 256×256
    assert torch.equal(CHAIN([view])[0], CHAIN([np.ascontiguousarray(view)])[0])


# ---- refusals --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "frame, rule",
    [(np.zeros((64, 64, 3), np.float32), "must be uint8 .* got dtype float32"),
     (np.zeros((64, 64, 3), np.uint16), "must be uint8 .* got dtype uint16"),
     (np.zeros((64, 64), np.uint8), r"shape \[H, W, 3\] .* got \[64, 64\]"),
     (np.zeros((64, 64, 4), np.uint8), r"got \[64, 64, 4\]"),
     (np.zeros((3, 64, 64), np.uint8), r"channels last.* got \[3, 64, 64\]"),
     (np.zeros((0, 64, 3), np.uint8), "is empty"),
     ([[[0, 0, 0]]], "numpy array, got list"),
     (np.zeros((1, 300, 3), np.uint8), "aspect ratio of 300x1 px exceeds 200")],
    ids=["float32", "uint16", "grey_2d", "rgba", "chw", "empty", "list", "extreme_aspect"],
)
def test_bad_frames_are_refused_naming_the_camera(frame, rule):
    with pytest.raises(InputError, match=rule) as err:
        CHAIN([make_frame(0, (64, 64)), frame], cameras=["ego_view", "wrist"])
    assert err.value.field == "images.wrist"
    with pytest.raises(InputError) as err:
        CHAIN([frame])
    assert err.value.field == "images[0]"


def test_camera_names_must_match_the_frames():
    with pytest.raises(InputError, match="1 frame"):
        CHAIN([make_frame(0, (64, 64))], cameras=["a", "b"])


@pytest.mark.parametrize(
    "overrides, rule",
    [({"use_albumentations": False}, "use_albumentations=false"), ({"crop_fraction": 0.0}, r"crop_fraction .*\(0, 1\]"),
     ({"crop_fraction": 1.5}, r"crop_fraction"), ({"shortest_image_edge": 0}, "positive integer"),
     ({"shortest_image_edge": 256.0}, "positive integer"), ({"shortest_image_edge": 1, "crop_fraction": 0.5},
                                                              "crops every frame to nothing")],
    ids=["torchvision_chain", "zero_crop", "crop_over_1", "zero_edge", "float_edge", "empty_crop"],
)
def test_unusable_processor_configs_are_refused(overrides, rule):
    with pytest.raises(ConfigError, match=rule):
        N16ImageChain.from_configs(Gr00tN16ProcessorConfig(**overrides), Eagle3Config())
