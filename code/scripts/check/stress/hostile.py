# SPDX-License-Identifier: Apache-2.0
"""The campaign's requests: valid ones (the demo request with a pooled seed, or with its own noise) and hostile
mutations of it (``Corpus.m_*``), each a ``Spec`` saying what its answer must be. Request ``i`` is drawn from
``Random(f"{seed}:{i}")``, so a campaign is reproducible request by request. Standard library (Pillow, when
installed, adds a JPEG case)."""

from __future__ import annotations

import base64
import copy
import json
import random
import struct
import zlib
from dataclasses import dataclass, field

SEED_POOL_SIZE = 20
WORDS = ("pick", "the", "pear", "from", "counter", "and", "place", "it", "in", "plate", "blue", "block",
         "green", "bowl", "robot", "arm", "left", "right", "slowly", "then", "open", "gripper", "xylophone")


# ------------------------------------------------------------------------------------------------ images

def png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def png_ihdr(width: int, height: int) -> bytes:
    return png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))  # 8-bit RGB


def pixel_row(width: int, y: int) -> bytes:
    """Row ``y`` of an RGB colour gradient."""
    return bytes(((x * 7 + y * 3 + c * 85) & 255) for x in range(width) for c in range(3))


def rgb_rows(width: int, rows: int) -> bytes:
    """``rows`` scanlines of the gradient, each with PNG filter byte 0."""
    return b"".join(b"\x00" + pixel_row(width, y) for y in range(rows))


def make_png(width: int, height: int) -> bytes:
    idat = zlib.compress(rgb_rows(width, height))
    return b"\x89PNG\r\n\x1a\n" + png_ihdr(width, height) + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")


def png_short_idat(width: int, height: int) -> bytes:
    """A well-formed PNG file (valid CRCs, IEND) whose IDAT holds only half of the compressed pixels."""
    idat = zlib.compress(rgb_rows(width, height))
    idat = idat[: len(idat) // 2]
    return b"\x89PNG\r\n\x1a\n" + png_ihdr(width, height) + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")


def png_cut_file(width: int, height: int) -> bytes:
    """A valid PNG file cut in the middle of its IDAT chunk (no IEND)."""
    data = make_png(width, height)
    return data[: int(len(data) * 0.6)]


def png_lying_header(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` but that carries one row of pixel data."""
    idat = zlib.compress(b"\x00" + bytes(width * 3))
    return b"\x89PNG\r\n\x1a\n" + png_ihdr(width, height) + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")


def png_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def make_jpeg(width: int, height: int) -> bytes | None:
    """A JPEG of the given size, or None without Pillow."""
    try:
        from io import BytesIO

        from PIL import Image
    except ImportError:
        return None
    image = Image.frombytes("RGB", (width, height), b"".join(pixel_row(width, y) for y in range(height)))
    buf = BytesIO()
    image.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# ------------------------------------------------------------------------------------------------ requests

@dataclass
class Spec:
    """One request to send and what is expected of its answer."""

    kind: str
    body: bytes
    expect: str  # "ok" (must be answered 200), "refuse" (200 is a failure) or "either"
    headers: list[tuple[str, str]] = field(default_factory=lambda: [("Content-Type", "application/json")])
    method: str = "POST"
    path: str = "/predict"
    declared_length: int | None = None  # a Content-Length other than len(body)
    close_after: bool = False
    statuses: tuple[int, ...] | None = None  # the only refusal statuses accepted for this kind
    det_key: str | None = None  # same key -> bit-identical actions expected
    seed: int | None = None
    check_xrid: bool = False


def encode(obj, literals: dict[str, bytes] | None = None, inline: dict[str, bytes] | None = None,
           indent: int | None = None) -> bytes:
    """JSON bytes of ``obj``; each string value equal to a ``literals`` token becomes that raw JSON text
    (``NaN``, ``1e400``), and each ``inline`` token inside a string becomes those raw bytes (invalid UTF-8)."""
    text = json.dumps(obj, indent=indent).encode("ascii")
    for token, raw in (literals or {}).items():
        text = text.replace(f'"{token}"'.encode(), raw)
    for token, raw in (inline or {}).items():
        text = text.replace(token.encode(), raw)
    return text


def long_text(rng: random.Random, length: int) -> str:
    block = " ".join(rng.choice(WORDS) for _ in range(4096))
    return (block * (length // len(block) + 1))[:length]


class Corpus:
    """Builds request ``i`` from ``Random(f"{seed}:{i}")``: the same seed gives the same campaign."""

    def __init__(self, demo_request: dict, contract: dict, seed: int, valid_fraction: float):
        self.demo = demo_request
        self.contract = contract
        self.seed = seed
        self.valid_fraction = valid_fraction
        pool = random.Random(f"{seed}:seeds")
        self.seed_pool = [pool.randrange(0, 2**63) for _ in range(SEED_POOL_SIZE - 1)] + [7]
        self.max_body = int(contract.get("max_body_bytes") or 64 * 2**20)
        self.ratio = (contract.get("images") or {}).get("width_over_height")  # [lo, hi] or None
        self.frame_wh = png_size(base64.b64decode(self.first_frame())) or self.default_frame_wh()
        self.max_wh = self.largest_frame()
        self.images = self.build_images()
        self.kinds = {name[len("m_"):]: getattr(self, name) for name in sorted(dir(self)) if name.startswith("m_")}
        if self.images["jpeg"] is None:
            del self.kinds["jpeg"]

    # --- helpers

    def first_frame(self) -> str:
        value = next(iter(self.demo["images"].values()))
        return value[0] if isinstance(value, list) else value

    def default_frame_wh(self) -> tuple[int, int]:
        return (320, 180) if self.ratio else (256, 256)

    def largest_frame(self) -> tuple[int, int]:
        """The largest frame the contract allows: the top side limit and, with an aspect band, its middle."""
        images = self.contract.get("images") or {}
        side = int((images.get("side_px") or [64, 4096])[1])
        ratio = images.get("width_over_height")
        if ratio:
            return side, round(side / ((ratio[0] + ratio[1]) / 2))
        return side, side

    def build_images(self) -> dict:
        w, h = self.frame_wh
        mw, mh = self.max_wh
        jpeg = make_jpeg(w, h)
        return {
            "short_idat": b64(png_short_idat(w, h)),
            "cut_file": b64(png_cut_file(w, h)),
            "lying_huge": b64(png_lying_header(60000, 60000)),
            "lying_max": b64(png_lying_header(mw, mh)),
            "lying_square": b64(png_lying_header(4096, 4096)),
            "wide": b64(make_png(w * 2, h)),
            "tall": b64(make_png(w, h * 2)),
            "jpeg": b64(jpeg) if jpeg else None,
        }

    def base(self, rng: random.Random, noise: bool = False) -> dict:
        req = copy.deepcopy(self.demo)
        if not noise:
            req.pop("noise", None)
            req["seed"] = rng.choice(self.seed_pool)
        return req

    @staticmethod
    def replace_frame(req: dict, rng: random.Random, frame: str) -> None:
        camera = rng.choice(sorted(req["images"]))
        value = req["images"][camera]
        if isinstance(value, list):
            value[rng.randrange(len(value))] = frame
        else:
            req["images"][camera] = frame

    @staticmethod
    def replace_all_frames(req: dict, frame: str) -> None:
        for camera, value in req["images"].items():
            req["images"][camera] = [frame] * len(value) if isinstance(value, list) else frame

    @staticmethod
    def flat(group) -> list:
        return list(group[0]) if group and isinstance(group[0], list) else list(group)

    def refuse(self, kind: str, req, **kw) -> Spec:
        body = req if isinstance(req, bytes) else encode(req)
        return Spec(kind, body, "refuse", **kw)

    # --- the requests

    def build(self, i: int) -> Spec:
        rng = random.Random(f"{self.seed}:{i}")
        if rng.random() < self.valid_fraction:
            return self.valid(rng)
        kind = rng.choice(sorted(self.kinds))
        return self.kinds[kind](rng)

    def valid(self, rng: random.Random) -> Spec:
        if rng.random() < 0.2:
            return Spec("valid_noise", encode(self.base(rng, noise=True)), "ok", det_key="noise:demo")
        req = self.base(rng)
        return Spec("valid_seed", encode(req), "ok", det_key=f"seed:{req['seed']}", seed=req["seed"])

    def amplification(self) -> Spec:
        req = self.base(random.Random(f"{self.seed}:amplification"))
        self.replace_all_frames(req, self.images["lying_max"])
        return self.refuse("amplification_png", req)

    def m_drop_key(self, rng):
        req = self.base(rng)
        del req[rng.choice(["images", "state", "instruction"])]
        return self.refuse("drop_key", req)

    def m_wrong_type(self, rng):
        req = self.base(rng)
        group = rng.choice(sorted(req["state"]))
        camera = rng.choice(sorted(req["images"]))
        n = len(self.flat(req["state"][group]))
        choices = {
            "images": ["ego", [], None, 123, True, [["x"]]],
            "state": ["state", [[1, 2]], None, 1.5, False],
            "instruction": [123, None, ["pick"], {"a": 1}, True, 1.5],
            "seed": ["7", 1.5, True, [1], {"a": 1}],
            "noise": ["noise", {"a": 1}, True, 5, [["x"] * 4]],
            "embodiment": [5, True, ["gr1"], {"x": 1}],
            "state_dtype": ["float16", 64, None, ""],
            "return_normalized": ["yes", 1, None, []],
            ("state", group): ["0.1", None, {"x": [1]}, [True] * n, [[["deep"]] * n], [10**40] * n, ["1"] * n],
            ("images", camera): [123, None, {"b64": "x"}, [123], True, 1.5],
        }
        target = rng.choice(list(choices))
        value = rng.choice(choices[target])
        if isinstance(target, tuple):
            req[target[0]][target[1]] = value
        else:
            req[target] = value
        return self.refuse("wrong_type", req)

    def m_huge_int_text(self, rng):
        req = self.base(rng)
        group = rng.choice(sorted(req["state"]))
        req["state"][group] = ["@@HUGE@@"] + self.flat(req["state"][group])[1:]
        digits = "9" * rng.choice([400, 5000, 100000])
        return self.refuse("huge_int_text", encode(req, literals={"@@HUGE@@": digits.encode()}))

    def m_deep_nesting(self, rng):
        req = self.base(rng)
        depth = rng.choice([1000, 100000])
        req["state"][rng.choice(sorted(req["state"]))] = "@@DEEP@@"
        return self.refuse("deep_nesting", encode(req, literals={"@@DEEP@@": b"[" * depth + b"]" * depth}))

    def m_extra_field(self, rng):
        req = self.base(rng)
        name = rng.choice(["foo", "__proto__", "seed2", "Instruction", "timeout", "images "])
        req[name] = rng.choice([1, None, {"a": [1, 2]}, "x" * 100])
        return self.refuse("extra_field", req)

    def m_nonfinite_state(self, rng):
        req = self.base(rng)
        group = rng.choice(sorted(req["state"]))
        values = self.flat(req["state"][group])
        values[rng.randrange(len(values))] = "@@NF@@"
        req["state"][group] = [values]
        literal = rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1e39"])
        return self.refuse("nonfinite_state", encode(req, literals={"@@NF@@": literal}))

    def m_state_wrong_length(self, rng):
        req = self.base(rng)
        group = rng.choice(sorted(req["state"]))
        values = self.flat(req["state"][group])
        variants = [values[:-1], values + [0.5], [], [values, values], [values[:-1]], [values + [0.1]]]
        req["state"][group] = rng.choice(variants)
        return self.refuse("state_wrong_length", req)

    def m_unknown_camera(self, rng):
        req = self.base(rng)
        name = rng.choice(["wrist", "ego_view2", "", "EGO_VIEW", "x" * 300, "ego view"])
        if rng.random() < 0.5:
            old = rng.choice(sorted(req["images"]))
            req["images"][name] = req["images"].pop(old)
        else:
            req["images"][name] = self.first_frame()
        return self.refuse("unknown_camera", req)

    def m_unknown_state_key(self, rng):
        req = self.base(rng)
        name = rng.choice(["torso", "left_leg", "", "LEFT_ARM", "y" * 300, "\u00e9\u4e2d\U0001f916"])
        req["state"][name] = [0.0] * 7
        return self.refuse("unknown_state_key", req)

    def m_surrogate_key(self, rng):
        req = self.base(rng)
        where = rng.choice(["state", "images", "top"])
        if where == "state":
            req["state"]["\udfff"] = [1]
        elif where == "images":
            req["images"]["\ud800x"] = self.first_frame()
        else:
            req["\udfff"] = 1
        return self.refuse("surrogate_key", req)  # json.dumps writes the lone surrogate as a \udfff escape

    def m_invalid_utf8_key(self, rng):
        req = self.base(rng)
        raw = rng.choice([b"\xed\xbf\xbf", b"\xed\xa0\x80", b"\xff\xfe", b"\xc3\x28", b"\x80"])
        if rng.random() < 0.5:
            req["state"]["@@RAW@@"] = [1]
        else:
            req["images"]["cam@@RAW@@"] = self.first_frame()
        return self.refuse("invalid_utf8_key", encode(req, inline={"@@RAW@@": raw}))

    def m_invalid_utf8_value(self, rng):
        req = self.base(rng)
        raw = rng.choice([b"\xed\xbf\xbf", b"\xed\xa0\x80", b"\xff", b"\xc3\x28", b"\xf4\x90\x80\x80"])
        target = rng.choice(["instruction", "embodiment", "state_dtype", "image"])
        if target == "instruction":
            req["instruction"] = req["instruction"] + " @@RAW@@"
            expect = "either"  # ED BF BF is a lone surrogate once decoded; a tokenizer might cope with it
        elif target == "image":
            self.replace_frame(req, rng, "@@RAW@@")
            expect = "refuse"
        else:
            req[target] = "x@@RAW@@"
            expect = "refuse"
        return Spec("invalid_utf8_value", encode(req, inline={"@@RAW@@": raw}), expect)

    def m_control_chars(self, rng):
        req = self.base(rng)
        text = list(req["instruction"])
        for _ in range(rng.randint(1, 4)):
            c = rng.choice(["\x00", "\x01", "\x1b[31m", "\x7f", "\u2028", "\ufeff", "\r\n", "\t", "\x85", "\u202e"])
            text.insert(rng.randrange(len(text) + 1), c)
        req["instruction"] = "".join(text)
        return Spec("control_chars", encode(req), "either")

    def m_long_instruction(self, rng):
        req = self.base(rng)
        length = int(4096 * 1024 ** rng.random())
        if rng.random() < 0.04 and 16 * 2**20 + 2**20 < self.max_body:
            length = 16 * 2**20
        req["instruction"] = long_text(rng, length)
        return self.refuse("long_instruction", req)

    def m_invalid_base64(self, rng):
        req = self.base(rng)
        good = self.first_frame()
        variants = [
            "!!!not base64!!!",
            "\n".join(good[i:i + 76] for i in range(0, len(good), 76)),
            good.replace("+", "-").replace("/", "_"),
            good.rstrip("=") + "A" if good.endswith("=") else good + "A",
            "\u00ff\u00fe" * 10,
            "data:image/png;base64,%%%",
            "",
            good[: len(good) // 2 * 2 + 1],
        ]
        frame = rng.choice(variants)
        if frame == good:
            frame = "!!!not base64!!!"
        self.replace_frame(req, rng, frame)
        return self.refuse("invalid_base64", req)

    def m_random_bytes_base64(self, rng):
        req = self.base(rng)
        self.replace_frame(req, rng, b64(rng.randbytes(rng.choice([1, 16, 1000, 100000]))))
        return self.refuse("random_bytes_base64", req)

    def with_image(self, rng, kind: str, names: tuple[str, ...], expect: str = "refuse") -> Spec:
        """The base request with one frame replaced by a prepared image (drawn from ``names`` when several)."""
        req = self.base(rng)
        self.replace_frame(req, rng, self.images[rng.choice(names) if len(names) > 1 else names[0]])
        return Spec(kind, encode(req), expect)

    def m_truncated_png(self, rng):
        return self.with_image(rng, "truncated_png", ("short_idat", "cut_file"))

    def m_png_header_huge(self, rng):
        return self.with_image(rng, "png_header_huge", ("lying_huge",))

    def m_png_header_max(self, rng):
        return self.with_image(rng, "png_header_max", ("lying_max", "lying_square"))

    def m_wrong_aspect(self, rng):
        return self.with_image(rng, "wrong_aspect", ("wide", "tall"), "refuse" if self.ratio else "either")

    def m_jpeg(self, rng):
        return self.with_image(rng, "jpeg", ("jpeg",), "either")

    def m_empty_body(self, rng):
        return self.refuse("empty_body", b"")

    def m_non_json_body(self, rng):
        body = rng.choice([b"{", b"nan", b"<xml/>", b"\x00\x01\x02", b"{'images': 1}", rng.randbytes(512),
                           b'{"images": {}, "state": {}, "instruction": "x",}', encode(self.base(rng))[:-1]])
        return self.refuse("non_json_body", body)

    def m_wrong_content_type(self, rng):
        ctype = rng.choice(["text/plain", None, "application/x-www-form-urlencoded",
                            "multipart/form-data; boundary=x", "image/png", "application/xml"])
        headers = [("Content-Type", ctype)] if ctype else []
        return self.refuse("wrong_content_type", encode(self.base(rng)), headers=headers)

    def m_json_not_object(self, rng):
        body = rng.choice([encode([self.base(rng)]), b"[]", b"null", b"42", b'"request"', b"true"])
        return self.refuse("json_not_object", body)

    def m_json_whitespace(self, rng):
        req = self.base(rng)
        body = b" \r\n\t" + encode(req, indent=rng.choice([1, 4])) + b"\n\n  "
        return Spec("json_whitespace", body, "either", det_key=f"seed:{req['seed']}", seed=req["seed"])

    def m_content_length_over_limit(self, rng):
        return self.refuse("content_length_over_limit", b'{"images": {}}', declared_length=100_000_000,
                           close_after=True, statuses=(413,))

    def m_xrid_long(self, rng):
        req = self.base(rng)
        headers = [("Content-Type", "application/json"), ("X-Request-ID", "a" * 4096)]
        return Spec("xrid_long", encode(req), "ok", headers=headers, check_xrid=True,
                    det_key=f"seed:{req['seed']}", seed=req["seed"])

    def m_xrid_control(self, rng):
        req = self.base(rng)
        value = rng.choice(["robot\x01step", "id\x1b[31mred\x1b[0m", "tab\tand\x7fdel", "caf\u00e9\u00ff",
                            "bell\x07" * 8])
        headers = [("Content-Type", "application/json"), ("X-Request-ID", value)]
        return Spec("xrid_control", encode(req), "either", headers=headers, check_xrid=True)

    def m_seed_out_of_range(self, rng):
        req = self.base(rng)
        req["seed"] = rng.choice([-1, 2**63, 2**64, -(2**63), 10**30])
        return self.refuse("seed_out_of_range", req)

    def m_noise_wrong_shape(self, rng):
        req = self.base(rng, noise=True)
        noise = req.get("noise") or [[0.0] * 8] * 8
        variants = [noise[:-1], noise + [noise[0]], [row[:-1] for row in noise], [], [[]], [noise, noise],
                    [x for row in noise for x in row], [[row] for row in noise]]
        req["noise"] = rng.choice(variants)
        return self.refuse("noise_wrong_shape", req)

    def m_noise_and_seed(self, rng):
        req = self.base(rng, noise=True)
        req["seed"] = 1
        return self.refuse("noise_and_seed", req)

    def m_embodiment_wrong(self, rng):
        req = self.base(rng)
        real = str(self.contract.get("embodiment") or "gr1")
        req["embodiment"] = rng.choice(["unitree_g1", "", real.upper(), real + " ", real + "\x00", "x" * 5000])
        return self.refuse("embodiment_wrong", req)
