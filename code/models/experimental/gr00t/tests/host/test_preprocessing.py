# SPDX-License-Identifier: Apache-2.0
"""The N1.5 image chain equals torchvision's transforms bit for bit; decoding equals OpenCV's."""

from __future__ import annotations

import base64
import io

import cv2
import numpy as np
import pytest
import torch
from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.preprocessing import decode_image, encode_png
from models.experimental.gr00t.common.preprocessing_n15 import center_crop, n15_pixel_values
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from ..conftest import make_frame


def torchvision_chain(rgb: np.ndarray) -> torch.Tensor:
    """NVIDIA's eval chain written with torchvision: ToTensor → CenterCrop(int(0.95·side)) →
    Resize(224, bilinear, antialias) → uint8 truncation → Normalize(0.5, 0.5) on [0, 1]."""
    x = torch.from_numpy(rgb).permute(2, 0, 1).to(torch.float32) / 255.0
    h, w = x.shape[-2:]
    x = TF.center_crop(x, [int(h * 0.95), int(w * 0.95)])
    x = v2.Resize((224, 224), interpolation=v2.InterpolationMode.BILINEAR, antialias=True)(x)
    u8 = (x * 255).to(torch.uint8)
    return TF.normalize(u8.to(torch.float32), mean=[127.5] * 3, std=[127.5] * 3)


@pytest.mark.parametrize("size", [(256, 256), (180, 320), (480, 640), (225, 301)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_pixel_values_equal_torchvision_bit_for_bit(size):
    rgb = make_frame(3, size)
    ours = n15_pixel_values(rgb)
    assert ours.shape == (3, 224, 224) and ours.dtype == torch.float32
    assert torch.equal(ours, torchvision_chain(rgb))


def test_crop_offset_rounds_half_to_even():
    x = torch.arange(256.0).view(1, 1, 256).expand(1, 256, 256)
    crop = center_crop(x)
    assert crop.shape[-2:] == (243, 243)
    assert crop[0, 0, 0].item() == 6.0  # (256 - 243) / 2 = 6.5 → 6


def test_truncation_quirk_turns_most_of_a_white_frame_into_254():
    # Antialiased weights sum to 1 − ε, so 255 comes back as 254.99998 and NVIDIA's uint8 cast
    # truncates it to 254: reproduced on purpose (torchvision agrees, see the bit-exact test above).
    white = np.full((256, 256, 3), 255, np.uint8)
    u8, counts = torch.unique((n15_pixel_values(white) * 127.5 + 127.5).round(), return_counts=True)
    assert u8.tolist() == [254.0, 255.0] and counts[0] > counts[1]
    assert (torch.tensor([0.9999]) * 255).to(torch.uint8).item() == 254


def test_png_decoding_equals_opencv():
    rgb = make_frame(5, (97, 131))
    b64 = encode_png(rgb)
    ours = decode_image(b64)
    theirs = cv2.cvtColor(cv2.imdecode(np.frombuffer(base64.b64decode(b64), np.uint8), cv2.IMREAD_COLOR),
                          cv2.COLOR_BGR2RGB)
    assert np.array_equal(ours, theirs) and np.array_equal(ours, rgb)


def test_jpeg_and_grayscale_are_accepted_as_rgb():
    buf = io.BytesIO()
    Image.fromarray(make_frame(1)[:, :, 0], "L").save(buf, format="JPEG")
    out = decode_image(base64.b64encode(buf.getvalue()).decode())
    assert out.shape == (256, 256, 3) and out.dtype == np.uint8


@pytest.mark.parametrize(
    "payload, rule",
    [("not base64!!", "not valid base64"), (base64.b64encode(b"hello").decode(), "could not be decoded"),
     (encode_png(np.zeros((32, 300, 3), np.uint8)), "64-4096")],
    ids=["not_base64", "not_an_image", "too_small"],
)
def test_bad_images_are_refused_with_the_field(payload, rule):
    with pytest.raises(InputError, match=rule) as err:
        decode_image(payload, "images.ego_view")
    assert err.value.field == "images.ego_view"
