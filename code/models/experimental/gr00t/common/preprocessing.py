# SPDX-License-Identifier: Apache-2.0
"""What every version's image handling shares: decoding a request's base64 PNG/JPEG frames, the side
limits of the contract, and encoding frames back (demos, tests). Each version's image chain is in
``preprocessing_n15.py`` / ``preprocessing_n17.py``.

Decoding is lossless for PNG, so which decoder runs does not change a pixel: the common case (8-bit RGB,
what every client sends) goes to OpenCV's libpng, about 1.5× faster than Pillow's; every other PNG kind and
JPEG go to Pillow (JPEG decoders differ in their IDCT, so JPEG keeps the one the contract was built with).
"""

from __future__ import annotations

import base64
import binascii
import io
import zlib
from collections.abc import Callable

import cv2
import numpy as np
from PIL import Image, UnidentifiedImageError

from .errors import InputError

ACCEPTED_FORMATS = ("PNG", "JPEG")  # the contract; other decoders stay unreachable from a request
MIN_SIDE, MAX_SIDE = 64, 4096
Image.MAX_IMAGE_PIXELS = MAX_SIDE * MAX_SIDE  # refuse decompression bombs before decoding


def decode_image(data: str | bytes, field: str = "image", check: Callable[[int, int], None] | None = None
                 ) -> np.ndarray:
    """Base64 (or raw) PNG/JPEG → uint8 RGB array [H, W, 3]; errors name ``field``. The header alone
    decides the side limits and ``check(h, w)`` (e.g. the layout's aspect range) before any pixel is
    decoded; a PNG whose image data is short (which Pillow would zero-fill) is refused."""
    if isinstance(data, str):
        if data.startswith("data:") and "," in data:  # tolerate a data URL prefix
            data = data.split(",", 1)[1]
        try:
            data = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InputError(field, "is not valid base64") from None
    if data.startswith(PNG_SIGNATURE) and (rgb := _decode_rgb8_png(data, field, check)) is not None:
        return rgb
    try:
        with Image.open(io.BytesIO(data), formats=ACCEPTED_FORMATS) as img:
            w, h = img.size
            check_side(field, h, w)
            if check is not None:
                check(h, w)
            if img.format == "PNG" and not png_data_complete(data):
                raise InputError(field, "is a truncated PNG: its image data is shorter than its header declares")
            rgb = np.array(img.convert("RGB"), dtype=np.uint8)  # a writable copy
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError, ValueError, SyntaxError, zlib.error):
        raise InputError(field, "could not be decoded as an image (PNG or JPEG expected)") from None
    return rgb


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type → samples per pixel
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
# OpenCV would rotate a frame carrying an EXIF orientation; Pillow's decode (the contract's) does not.
_CV2_FLAGS = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION


def _decode_rgb8_png(data: bytes, field: str, check: Callable[[int, int], None] | None) -> np.ndarray | None:
    """An 8-bit RGB PNG (colour type 2, either interlace) → uint8 RGB [H, W, 3] through OpenCV, with the same
    refusals as the Pillow path (sides and ``check`` from the header before any pixel, short image data);
    ``None`` for any other PNG kind or an unreadable header, which the Pillow path then decodes or refuses."""
    header, idat = _png_chunks(data)
    if header is None or len(header) < 13 or header[8] != 8 or header[9] != 2 or header[12] > 1:
        return None
    w, h = int.from_bytes(header[0:4], "big"), int.from_bytes(header[4:8], "big")
    check_side(field, h, w)
    if check is not None:
        check(h, w)
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), _CV2_FLAGS)
    if bgr is None or bgr.shape != (h, w, 3) or bgr.dtype != np.uint8:
        # libpng refuses short image data ("Not enough image data") where Pillow would zero-fill it, so the
        # inflation check only has to name the reason here, on the error path.
        try:
            short = not _idat_complete(header, idat)
        except zlib.error:
            short = False
        if short:
            raise InputError(field, "is a truncated PNG: its image data is shorter than its header declares")
        raise InputError(field, "could not be decoded as an image (PNG or JPEG expected)")  # e.g. a bad CRC
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def _png_chunks(data: bytes) -> tuple[bytes | None, list[bytes]]:
    """(IHDR body or None, the IDAT bodies in order), walking the chunk list up to IEND."""
    pos, idat, header = 8, [], None
    while pos + 8 <= len(data):
        length, kind = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    return header, idat


def png_data_complete(data: bytes) -> bool:
    """Whether the PNG's IDAT stream inflates to every filtered row its IHDR declares (PNG spec 1.2,
    sections 4 and 7–8). Inflation stops one byte past that length, so a bomb costs no more than a frame."""
    header, idat = _png_chunks(data)
    return header is not None and len(header) >= 13 and _idat_complete(header, idat)


def _idat_complete(header: bytes, idat: list[bytes]) -> bool:
    w, h = int.from_bytes(header[0:4], "big"), int.from_bytes(header[4:8], "big")
    depth, colour, interlace = header[8], header[9], header[12]
    bits = _PNG_CHANNELS.get(colour, 0) * depth
    passes = _ADAM7 if interlace == 1 else ((0, 0, 1, 1),)
    expected = 0
    for x0, y0, dx, dy in passes:
        pw, ph = (w - x0 + dx - 1) // dx, (h - y0 + dy - 1) // dy
        if pw > 0 and ph > 0:
            expected += ph * (1 + (pw * bits + 7) // 8)  # one filter byte per row
    inflated = zlib.decompressobj().decompress(b"".join(idat), expected + 1)
    return bits > 0 and len(inflated) >= expected


def check_side(field: str, h: int, w: int) -> None:
    if not (MIN_SIDE <= h <= MAX_SIDE and MIN_SIDE <= w <= MAX_SIDE):
        raise InputError(field, f"image is {w}x{h} px; each side must be within {MIN_SIDE}-{MAX_SIDE} px")


def encode_png(rgb: np.ndarray) -> str:
    """uint8 [H, W, 3] → base64 PNG (the request format)."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8), "RGB").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()
