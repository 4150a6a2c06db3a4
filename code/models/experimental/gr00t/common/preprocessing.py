# SPDX-License-Identifier: Apache-2.0
"""What every version's image handling shares: decoding a request's base64 PNG/JPEG frames, the side
limits of the contract, and encoding frames back (demos, tests). Each version's image chain is in
``preprocessing_n15.py`` / ``preprocessing_n17.py``.
"""

from __future__ import annotations

import base64
import binascii
import io

import numpy as np
from PIL import Image, UnidentifiedImageError

from .errors import InputError

ACCEPTED_FORMATS = ("PNG", "JPEG")  # the contract; other decoders stay unreachable from a request
MIN_SIDE, MAX_SIDE = 64, 4096
Image.MAX_IMAGE_PIXELS = MAX_SIDE * MAX_SIDE  # refuse decompression bombs before decoding


def decode_image(data: str | bytes, field: str = "image") -> np.ndarray:
    """Base64 (or raw) PNG/JPEG → uint8 RGB array [H, W, 3]; errors name ``field``."""
    if isinstance(data, str):
        if data.startswith("data:") and "," in data:  # tolerate a data URL prefix
            data = data.split(",", 1)[1]
        try:
            data = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InputError(field, "is not valid base64") from None
    try:
        with Image.open(io.BytesIO(data), formats=ACCEPTED_FORMATS) as img:
            w, h = img.size
            check_side(field, h, w)
            rgb = np.array(img.convert("RGB"), dtype=np.uint8)  # a writable copy
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError, ValueError, SyntaxError):
        raise InputError(field, "could not be decoded as an image (PNG or JPEG expected)") from None
    return rgb


def check_side(field: str, h: int, w: int) -> None:
    if not (MIN_SIDE <= h <= MAX_SIDE and MIN_SIDE <= w <= MAX_SIDE):
        raise InputError(field, f"image is {w}x{h} px; each side must be within {MIN_SIDE}-{MAX_SIDE} px")


def encode_png(rgb: np.ndarray) -> str:
    """uint8 [H, W, 3] → base64 PNG (the request format)."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8), "RGB").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()
