# SPDX-License-Identifier: Apache-2.0
"""The N1.5 image chain equals torchvision's transforms bit for bit; decoding equals OpenCV's."""

from __future__ import annotations

import base64
import io
import zlib

import cv2
import numpy as np
import pytest
import torch
from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.preprocessing import decode_image, encode_png, png_data_complete
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


def _png(w: int, h: int, depth: int, colour: int, rows: bytes, interlace: int = 0) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    ihdr = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([depth, colour, 0, 0, interlace])
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _adam7_rgb(rgb: np.ndarray) -> bytes:
    """Filtered rows of an Adam7-interlaced 8-bit RGB PNG (PNG spec 1.2, section 8.2), written here."""
    out = b""
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)):
        sub = rgb[y0::dy, x0::dx]
        if sub.size:
            out += b"".join(b"\x00" + row.tobytes() for row in sub)
    return out


@pytest.mark.parametrize("mode", ["1", "L", "LA", "P", "RGB", "RGBA", "I;16"])
def test_complete_pngs_of_every_kind_pass_the_completeness_check(mode):
    rng = np.random.default_rng(3)
    img = Image.fromarray(rng.integers(0, 255, (67, 93, 3), np.uint8))
    img = Image.fromarray(rng.integers(0, 65535, (67, 93)).astype(np.uint16)) if mode == "I;16" else img.convert(mode)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    assert png_data_complete(buf.getvalue())


def test_an_interlaced_png_passes_and_decodes_like_pillow_reads_it():
    rgb = np.random.default_rng(4).integers(0, 255, (70, 101, 3), np.uint8)
    data = _png(101, 70, 8, 2, _adam7_rgb(rgb), interlace=1)
    assert png_data_complete(data)
    assert np.array_equal(decode_image(data), rgb)  # Pillow de-interlaces our hand-written stream exactly


@pytest.mark.parametrize("interlace", [0, 1])
def test_a_png_with_short_image_data_is_refused(interlace):
    rgb = np.zeros((64, 64, 3), np.uint8)
    rows = _adam7_rgb(rgb) if interlace else b"".join(b"\x00" + r.tobytes() for r in rgb)
    short = _png(64, 64, 8, 2, rows[:-7], interlace)  # a complete zlib stream, 7 bytes of pixels missing
    assert png_data_complete(_png(64, 64, 8, 2, rows, interlace)) and not png_data_complete(short)
    with pytest.raises(InputError, match="truncated PNG"):
        decode_image(short)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_byte_truncated_files_are_refused(fmt):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(5).integers(0, 255, (96, 128, 3), np.uint8)).save(buf, format=fmt)
    with pytest.raises(InputError, match="could not be decoded|truncated"):
        decode_image(buf.getvalue()[: len(buf.getvalue()) // 2])


def test_the_header_check_runs_before_any_pixel_is_decoded():
    garbage = _png(400, 400, 8, 2, b"\x00" * 10)[:-12]  # a valid header, no decodable pixels
    seen = []

    def check(h: int, w: int) -> None:
        seen.append((h, w))
        raise InputError("images.cam", "refused by its header")

    with pytest.raises(InputError, match="refused by its header"):
        decode_image(garbage, "images.cam", check=check)
    assert seen == [(400, 400)]


def _with_chunks(png: bytes, *chunks: tuple[bytes, bytes]) -> bytes:
    """``png`` with ancillary chunks inserted right after IHDR (8 + 25 bytes in)."""
    extra = b"".join(len(d).to_bytes(4, "big") + k + d + zlib.crc32(k + d).to_bytes(4, "big") for k, d in chunks)
    return png[:33] + extra + png[33:]


def _pillow_png(rgb: np.ndarray, **save) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, format="PNG", **save)
    return buf.getvalue()


def _pillow_decode(data: bytes) -> np.ndarray:
    return np.array(Image.open(io.BytesIO(data)).convert("RGB"))


# An EXIF block (little-endian TIFF) whose one tag is Orientation = 6 (rotate 90°): Pillow ignores it when
# decoding, and so must the OpenCV path.
_EXIF_ROTATE = b"II*\x00\x08\x00\x00\x00\x01\x00\x12\x01\x03\x00\x01\x00\x00\x00\x06\x00\x00\x00\x00\x00\x00\x00"


@pytest.mark.parametrize("variant", ["level0", "level1", "level9", "optimize", "trns", "ancillary", "exif_rotate",
                                     "interlaced"])
def test_rgb8_pngs_decode_through_opencv_exactly_as_pillow_reads_them(variant, monkeypatch):
    rgb = np.random.default_rng(6).integers(0, 256, (75, 133, 3), np.uint8)
    rgb[:30] = rgb[0]  # flat rows too, so the encoder's filters differ row to row
    data = {"level0": lambda: _pillow_png(rgb, compress_level=0), "level1": lambda: _pillow_png(rgb, compress_level=1),
            "level9": lambda: _pillow_png(rgb, compress_level=9), "optimize": lambda: _pillow_png(rgb, optimize=True),
            "trns": lambda: _pillow_png(rgb, transparency=tuple(int(v) for v in rgb[0, 0])),
            "ancillary": lambda: _with_chunks(_pillow_png(rgb), (b"gAMA", (100000).to_bytes(4, "big")),
                                              (b"sRGB", b"\x00"), (b"sBIT", b"\x05\x06\x05")),
            "exif_rotate": lambda: _with_chunks(_pillow_png(rgb), (b"eXIf", _EXIF_ROTATE)),
            "interlaced": lambda: _png(133, 75, 8, 2, _adam7_rgb(rgb), interlace=1)}[variant]()
    calls = []
    real = cv2.imdecode
    monkeypatch.setattr(cv2, "imdecode", lambda *a: calls.append(1) or real(*a))
    ours = decode_image(data)
    assert calls == [1], "the 8-bit RGB PNG did not take the OpenCV path"
    assert ours.dtype == np.uint8 and ours.flags.writeable
    assert np.array_equal(ours, _pillow_decode(data)) and np.array_equal(ours, rgb)


@pytest.mark.parametrize("mode", ["L", "P", "RGBA", "I;16"])
def test_other_png_kinds_stay_on_pillow(mode, monkeypatch):
    rgb = np.random.default_rng(7).integers(0, 256, (70, 90, 3), np.uint8)
    img = Image.fromarray(rgb[..., 0].astype(np.uint16) * 257) if mode == "I;16" else Image.fromarray(rgb).convert(mode)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    monkeypatch.setattr(cv2, "imdecode", lambda *a: pytest.fail("OpenCV decoded a non-RGB8 PNG"))
    assert np.array_equal(decode_image(buf.getvalue()), _pillow_decode(buf.getvalue()))


def test_an_rgb8_png_with_a_corrupt_idat_crc_is_refused():
    data = bytearray(_pillow_png(np.random.default_rng(8).integers(0, 256, (64, 64, 3), np.uint8)))
    iend = data.rindex(b"IEND")
    data[iend - 5] ^= 0xFF  # the last IDAT's CRC (the 4 bytes before IEND's length)
    with pytest.raises(InputError, match="could not be decoded"):
        decode_image(bytes(data), "images.ego_view")


@pytest.mark.parametrize("cut", ["rows_7_bytes", "one_row", "half_the_rows", "zlib_stream_cut"])
@pytest.mark.parametrize("interlace", [0, 1])
def test_every_short_rgb8_png_is_refused_as_truncated_by_the_opencv_path(cut, interlace):
    # The OpenCV path relies on libpng refusing short image data (Pillow zero-fills it): each way a
    # stream can be short, both interlace modes.
    rgb = np.random.default_rng(9).integers(0, 256, (64, 64, 3), np.uint8)
    rows = _adam7_rgb(rgb) if interlace else b"".join(b"\x00" + r.tobytes() for r in rgb)
    if cut == "zlib_stream_cut":
        stream = zlib.compress(rows)
        data = _png_raw(64, 64, interlace, stream[: len(stream) // 2])
    else:
        data = _png(64, 64, 8, 2, rows[:-{"rows_7_bytes": 7, "one_row": 193, "half_the_rows": len(rows) // 2}[cut]],
                    interlace)
    with pytest.raises(InputError, match="truncated PNG"):
        decode_image(data)


def _png_raw(w: int, h: int, interlace: int, idat: bytes) -> bytes:
    """An 8-bit RGB PNG whose IDAT holds ``idat`` as given (no compression applied)."""
    png = _png(w, h, 8, 2, b"", interlace)
    head, tail = png[:33], png[-12:]  # signature + IHDR, IEND
    return head + len(idat).to_bytes(4, "big") + b"IDAT" + idat + zlib.crc32(b"IDAT" + idat).to_bytes(4, "big") + tail
