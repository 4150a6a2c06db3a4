# SPDX-License-Identifier: Apache-2.0
"""Long-run fuzz and stress campaign against a real GR00T policy server process.

The tool starts the server as a subprocess (uvicorn, ``gr00t_p150.server.app:app``), or attacks one that is
already running (``--url``), and then runs these phases:

1. campaign      --requests N POST /predict calls from --concurrency keep-alive connections: valid requests
                 (the GET /demo request with a seed from a small pool, or with its own noise) mixed with hostile
                 mutations (missing keys, wrong types, NaN/1e400, lone surrogates and invalid UTF-8 in keys,
                 megabyte instructions, broken base64, truncated PNGs, PNGs whose header lies about their size,
                 JPEG, bad bodies and content types, a lying Content-Length, odd X-Request-ID headers, ...).
                 Every answer is checked: allowed statuses only, a JSON ``error`` body on every refusal, no
                 traceback or server path in it, identical actions for repeated seeds. RSS is sampled throughout.
2. amplification 16 connections x 5 rounds of a small request whose frames are PNGs declaring the largest frame
                 the server accepts by header, with one row of pixel data; peak RSS is reported.
3. stalls        8 sockets that stop inside the headers and 8 that stop inside the body; when does the server
                 close them (408 or close), and is a fresh valid request still answered meanwhile.
4. SIGTERM       (only for a server this tool started) 4 requests in flight, then SIGTERM: are they answered and
                 how does the process exit; then (--double-sigterm) a fresh server, 8 requests, SIGTERM twice.

It prints a summary with PASS/FAIL per criterion, writes everything to a JSON file and exits 0 only when every
criterion passes (1 when one fails, 2 when the server could not be started or reached). Mutations are drawn
from a fixed --seed, so a run is reproducible request by request.

Standard library only (Pillow, when installed, adds a JPEG case); nothing of the server's code is imported.

    .venv/bin/python code/scripts/stress_server.py --version n15 --quick --http-protocol h11
    .venv/bin/python code/scripts/stress_server.py --version n17 --requests 10000 --concurrency 8
    .venv/bin/python code/scripts/stress_server.py --url http://127.0.0.1:20000 --pid 12345 --quick
"""

from __future__ import annotations

import argparse
import base64
import copy
import datetime
import http.client
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APP = "gr00t_p150.server.app:app"
ALLOWED_REFUSALS = (400, 408, 413, 415, 429)  # plus 504 always, 503 during shutdown
LEAK_MARKERS = ("Traceback", 'File "', "/work/", "/tmp/", "/home/", "/usr/lib", "site-packages")
MAX_REFUSAL_S = 5.0
MAX_DRIFT_PCT = 5.0
MAX_XRID_CHARS = 128
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

    def m_truncated_png(self, rng):
        req = self.base(rng)
        self.replace_frame(req, rng, self.images[rng.choice(["short_idat", "cut_file"])])
        return self.refuse("truncated_png", req)

    def m_png_header_huge(self, rng):
        req = self.base(rng)
        self.replace_frame(req, rng, self.images["lying_huge"])
        return self.refuse("png_header_huge", req)

    def m_png_header_max(self, rng):
        req = self.base(rng)
        self.replace_frame(req, rng, self.images[rng.choice(["lying_max", "lying_square"])])
        return self.refuse("png_header_max", req)

    def m_wrong_aspect(self, rng):
        req = self.base(rng)
        self.replace_frame(req, rng, self.images[rng.choice(["wide", "tall"])])
        return Spec("wrong_aspect", encode(req), "refuse" if self.ratio else "either")

    def m_jpeg(self, rng):
        req = self.base(rng)
        self.replace_frame(req, rng, self.images["jpeg"])
        return Spec("jpeg", encode(req), "either")

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


# ------------------------------------------------------------------------------------------------ HTTP client

@dataclass
class Outcome:
    status: int | None = None
    headers: dict = field(default_factory=dict)
    body: bytes = b""
    seconds: float = 0.0
    error: str | None = None  # "HANG" or "conn_error: <type>"


class Client:
    """One keep-alive connection; reconnects when the server closed it."""

    def __init__(self, host: str, port: int, timeout: float, auth: str | None = None):
        self.host, self.port, self.timeout, self.auth = host, port, timeout, auth
        self.conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def send(self, spec: Spec) -> Outcome:
        for attempt in range(2):
            fresh = self.conn is None
            if fresh:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            t0 = time.perf_counter()
            try:
                outcome = self.exchange(spec)
            except TimeoutError:
                self.close()
                return Outcome(seconds=time.perf_counter() - t0, error="HANG")
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if not fresh and attempt == 0:
                    continue  # the server closed an idle keep-alive connection: retry once on a new one
                return Outcome(seconds=time.perf_counter() - t0, error=f"conn_error: {type(exc).__name__}")
            outcome.seconds = time.perf_counter() - t0
            if spec.close_after or outcome.headers.get("connection", "").lower() == "close":
                self.close()
            return outcome
        return Outcome(error="conn_error: retry")

    def exchange(self, spec: Spec) -> Outcome:
        conn = self.conn
        conn.putrequest(spec.method, spec.path, skip_accept_encoding=True)
        for name, value in spec.headers:
            conn.putheader(name, value)
        if self.auth:
            conn.putheader("Authorization", f"Bearer {self.auth}")
        if spec.method == "POST":
            length = spec.declared_length if spec.declared_length is not None else len(spec.body)
            conn.putheader("Content-Length", str(length))
        conn.endheaders(spec.body or None)
        resp = conn.getresponse()
        body = resp.read()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return Outcome(status=resp.status, headers=headers, body=body)


def get_json(host: str, port: int, path: str, timeout: float = 60, auth: str | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {auth}"} if auth else {}
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        try:
            return resp.status, json.loads(data)
        except ValueError:
            return resp.status, {}
    finally:
        conn.close()


# ------------------------------------------------------------------------------------------------ judging

def snippet(data: bytes, limit: int = 300) -> str:
    return data[:limit].decode("utf-8", "replace")


def error_body_ok(body: bytes) -> bool:
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    return isinstance(parsed, dict) and isinstance(parsed.get("error"), dict)


def leaks(body: bytes) -> list[str]:
    text = body.decode("utf-8", "replace")
    return [m for m in LEAK_MARKERS if m in text]


def xrid_ok(value: str | None) -> bool:
    return value is None or (len(value) <= MAX_XRID_CHARS and value.isascii() and value.isprintable())


def retry_after_ok(value: str | None) -> bool:
    return value is not None and value.strip().isdigit() and int(value) > 0


class Stats:
    """Everything recorded about one phase's answers (thread-safe)."""

    def __init__(self, name: str, progress_every: int = 0, rss=None):
        self.name = name
        self.lock = threading.Lock()
        self.by_kind: dict[str, Counter] = {}
        self.failures: Counter = Counter()
        self.examples: list[dict] = []
        self.accepted: Counter = Counter()  # hostile kinds answered 200
        self.server_errors: Counter = Counter()  # kind -> count of unexpected 5xx
        self.valid_ms: list[float] = []
        self.slowest_refusal: dict = {"seconds": 0.0}
        self.actions: dict[str, object] = {}
        self.determinism = {"compared": 0, "mismatched": 0, "keys": 0}
        self.done = 0
        self.progress_every = progress_every
        self.rss = rss
        self.t0 = time.monotonic()

    def fail(self, reason: str, spec: Spec, outcome: Outcome, index: int | None, note: str = "") -> None:
        self.failures[reason] += 1
        if len(self.examples) < 100:
            self.examples.append({"reason": reason, "kind": spec.kind, "index": index, "status": outcome.status,
                                  "error": outcome.error, "note": note, "body": snippet(outcome.body)})

    def record(self, spec: Spec, outcome: Outcome, index: int | None = None, shutdown: bool = False) -> None:
        with self.lock:
            label = outcome.error.split(":")[0] if outcome.error else str(outcome.status)
            self.by_kind.setdefault(spec.kind, Counter())[label] += 1
            self.judge(spec, outcome, index, shutdown)
            self.done += 1
            if self.progress_every and self.done % self.progress_every == 0:
                rss = self.rss() if self.rss else None
                rss_text = f", server RSS {rss:.0f} MiB" if rss else ""
                print(f"  [{self.name}] {self.done} requests, {time.monotonic() - self.t0:.0f} s{rss_text}",
                      flush=True)

    def judge(self, spec: Spec, outcome: Outcome, index, shutdown: bool) -> None:
        if outcome.error == "HANG":
            return self.fail("hang", spec, outcome, index)
        if outcome.error:
            if not shutdown:
                self.fail("conn_error", spec, outcome, index, outcome.error)
            return None
        if outcome.status == 200:
            return self.judge_ok(spec, outcome, index)
        return self.judge_refusal(spec, outcome, index, shutdown)

    def judge_ok(self, spec: Spec, outcome: Outcome, index) -> None:
        if spec.expect != "ok":
            self.accepted[spec.kind] += 1
            if spec.expect == "refuse":
                self.fail("forbidden_accept", spec, outcome, index)
        try:
            answer = json.loads(outcome.body)
            actions = answer["actions"]
        except (ValueError, KeyError, TypeError):
            return self.fail("bad_200_body", spec, outcome, index)
        if spec.expect == "ok" or spec.kind.startswith("valid"):
            self.valid_ms.append(outcome.seconds * 1e3)
        if spec.check_xrid and not xrid_ok(outcome.headers.get("x-request-id")):
            self.fail("bad_x_request_id", spec, outcome, index, repr(outcome.headers.get("x-request-id"))[:200])
        if spec.seed is not None and answer.get("seed") != spec.seed:
            self.fail("seed_not_echoed", spec, outcome, index, f"sent {spec.seed}, got {answer.get('seed')}")
        if spec.det_key:
            self.compare_actions(spec, outcome, index, actions)
        return None

    def compare_actions(self, spec: Spec, outcome: Outcome, index, actions) -> None:
        first = self.actions.setdefault(spec.det_key, actions)
        if first is actions:
            self.determinism["keys"] += 1
            return
        self.determinism["compared"] += 1
        if first != actions:
            self.determinism["mismatched"] += 1
            self.fail("nondeterministic", spec, outcome, index, spec.det_key)

    def judge_refusal(self, spec: Spec, outcome: Outcome, index, shutdown: bool) -> None:
        status = outcome.status
        if outcome.seconds > self.slowest_refusal["seconds"]:
            self.slowest_refusal = {"seconds": round(outcome.seconds, 4), "kind": spec.kind, "status": status,
                                    "index": index, "body_bytes": len(spec.body)}
        if status == 422:
            self.fail("status_422", spec, outcome, index)
        elif status >= 500 and not (status == 504 or (status == 503 and shutdown)):
            self.server_errors[spec.kind] += 1
            self.fail("unexpected_5xx", spec, outcome, index)
        elif status < 500 and status not in ALLOWED_REFUSALS:
            self.fail("unexpected_status", spec, outcome, index)
        if spec.expect == "ok" and status in (400, 413, 415):
            self.fail("valid_refused", spec, outcome, index)
        if spec.statuses and status not in spec.statuses:
            self.fail("wrong_status", spec, outcome, index, f"expected {spec.statuses}")
        if status == 429 and not retry_after_ok(outcome.headers.get("retry-after")):
            self.fail("bad_retry_after", spec, outcome, index, repr(outcome.headers.get("retry-after")))
        if not error_body_ok(outcome.body):
            self.fail("bad_error_body", spec, outcome, index)
        found = leaks(outcome.body)
        if found:
            self.fail("leak_in_error", spec, outcome, index, ", ".join(found))

    def summary(self) -> dict:
        ms = sorted(self.valid_ms)
        return {
            "requests": self.done,
            "by_kind": {k: dict(sorted(v.items())) for k, v in sorted(self.by_kind.items())},
            "failures": dict(self.failures),
            "failure_examples": self.examples,
            "accepted_mutations": dict(self.accepted),
            "unexpected_5xx_by_kind": dict(self.server_errors),
            "valid_latency_ms": {"n": len(ms), "p50": percentile(ms, 50), "p99": percentile(ms, 99),
                                 "max": round(ms[-1], 2) if ms else None},
            "slowest_refusal": self.slowest_refusal,
            "determinism": self.determinism,
            "seconds": round(time.monotonic() - self.t0, 2),
        }


def percentile(ordered: list[float], pct: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))], 2)


# ------------------------------------------------------------------------------------------------ RSS

def status_kib(pid: int, name: str = "VmRSS") -> int:
    """A ``/proc/<pid>/status`` figure in KiB: VmRSS (resident now) or VmHWM (the most it ever was)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def child_pids(pid: int) -> list[int]:
    """Every descendant of ``pid`` (scans /proc for parent ids)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


def tree_rss_mib(pid: int | None, name: str = "VmRSS") -> float | None:
    """The server's figure plus its descendants' (MiB), None when there is no such process."""
    if not pid or not os.path.exists(f"/proc/{pid}"):
        return None
    return (status_kib(pid, name) + sum(status_kib(p, name) for p in child_pids(pid))) / 1024


def round1(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


class RssSampler(threading.Thread):
    """Samples the server's RSS (with its children) every ``period`` s as (seconds, phase, done, MiB)."""

    def __init__(self, pid: int | None, period: float = 0.5):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.samples: list[tuple[float, str, int, float]] = []
        self.phase, self.done = "idle", lambda: 0
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()

    def set_phase(self, phase: str, done=lambda: 0) -> None:
        self.phase, self.done = phase, done

    def run(self) -> None:
        while not self.stop_event.wait(self.period):
            rss = tree_rss_mib(self.pid)
            if rss is not None:
                self.samples.append((round(time.monotonic() - self.t0, 2), self.phase, self.done(), round(rss, 1)))

    def phase_samples(self, phase: str) -> list[tuple[float, str, int, float]]:
        return [s for s in self.samples if s[1] == phase]


def rss_report(sampler: RssSampler, final_mib: float | None, warm_mark: int) -> dict:
    samples = sampler.phase_samples("campaign")
    if not samples or final_mib is None:
        return {"measured": False}
    at_warm = next((s[3] for s in samples if s[2] >= warm_mark), samples[-1][3])
    peak = max([s[3] for s in samples] + [final_mib])
    drift = (final_mib - at_warm) / at_warm * 100 if at_warm else None
    return {"measured": True, "warm_mark_requests": warm_mark, "after_warmup_mib": at_warm,
            "final_mib": round(final_mib, 1), "max_mib": peak, "drift_pct": round(drift, 2) if drift is not None
            else None, "hwm_mib": round1(tree_rss_mib(sampler.pid, "VmHWM")),
            "samples": [list(s) for s in samples[:: max(1, len(samples) // 400)]]}


# ------------------------------------------------------------------------------------------------ server

class Server:
    """A uvicorn process serving the app, started by this tool."""

    def __init__(self, args, port: int, log_path: Path):
        self.args, self.port, self.log_path = args, port, log_path
        self.proc: subprocess.Popen | None = None

    def env(self) -> dict:
        env = dict(os.environ)
        env.update({"GR00T_VERSION": self.args.version, "GR00T_WEIGHTS": self.args.weights,
                    "GR00T_CACHE": str(self.args.cache), "PYTHONPATH": str(REPO / "code")})
        for item in self.args.env:
            key, _, value = item.partition("=")
            env[key] = value
        return env

    def command(self) -> list[str]:
        return [self.args.python, "-m", "uvicorn", "--http", self.args.http_protocol, "--host", "127.0.0.1",
                "--port", str(self.port), "--lifespan", "on", APP]

    def start(self) -> None:
        log = open(self.log_path, "ab")
        print(f"starting server: {' '.join(self.command())}  (log {self.log_path})", flush=True)
        self.proc = subprocess.Popen(self.command(), env=self.env(), cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float) -> bool:
        t0 = last = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                print(f"server exited during boot with {format_exit(self.proc.returncode)}; log tail:")
                print(tail(self.log_path))
                return False
            if health_ok("127.0.0.1", self.port):
                print(f"server ready after {time.monotonic() - t0:.1f} s (pid {self.pid})", flush=True)
                return True
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                print(f"  waiting for /health ... {last - t0:.0f} s", flush=True)
            time.sleep(0.5)
        print(f"server not ready after {timeout:.0f} s; log tail:")
        print(tail(self.log_path))
        return False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def health_ok(host: str, port: int) -> bool:
    try:
        status, _ = get_json(host, port, "/health", timeout=5)
    except OSError:
        return False
    return status == 200


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def format_exit(returncode: int | None) -> str:
    """Popen's returncode as a shell shows it: -15 (killed by the signal) and 143 both read "143 (SIGTERM)"."""
    if returncode is None:
        return "did not exit"
    if returncode < 0:
        return f"{128 - returncode} ({signal_name(-returncode)}, killed by the signal)"
    if returncode > 128:
        return f"{returncode} ({signal_name(returncode - 128)})"
    return str(returncode)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------ phases

def run_campaign(target: dict, corpus: Corpus, args, sampler: RssSampler) -> tuple[Stats, dict]:
    rss = (lambda: tree_rss_mib(target["pid"])) if target["pid"] else None
    stats = Stats("campaign", args.progress_every, rss)
    counter = iter(range(args.requests))
    counter_lock = threading.Lock()

    def next_index() -> int | None:
        with counter_lock:
            return next(counter, None)

    def worker() -> None:
        client = Client(target["host"], target["port"], args.timeout, args.api_key)
        while (i := next_index()) is not None:
            spec = corpus.build(i)
            stats.record(spec, client.send(spec), index=i)
        client.close()

    print(f"campaign: {args.requests} requests, concurrency {args.concurrency}, "
          f"valid fraction {args.valid_fraction}, seed {args.seed}", flush=True)
    sampler.set_phase("campaign", lambda: stats.done)
    with ThreadPoolExecutor(args.concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(args.concurrency)]:
            future.result()
    sampler.set_phase("idle")
    final = tree_rss_mib(target["pid"])
    return stats, rss_report(sampler, final, min(500, max(1, args.requests // 2)))


def probe_amplification_size(target: dict, corpus: Corpus, args) -> dict:
    """Send the largest-frame PNG once; report whether the server refused it by its header alone."""
    outcome = Client(target["host"], target["port"], args.timeout, args.api_key).send(corpus.amplification())
    rule = ""
    try:
        rule = json.loads(outcome.body)["error"]["rule"]
    except (ValueError, KeyError, TypeError):
        pass
    by_header = any(word in rule for word in (" px", "width/height"))
    return {"frame_wh": list(corpus.max_wh), "status": outcome.status, "rule": rule[:300],
            "refused_by_header": by_header}


def run_amplification(target: dict, corpus: Corpus, args, sampler: RssSampler) -> dict:
    stats = Stats("amplification")
    probe = probe_amplification_size(target, corpus, args)
    spec = corpus.amplification()
    clients = [Client(target["host"], target["port"], args.timeout, args.api_key) for _ in range(16)]
    before, hwm_before = tree_rss_mib(target["pid"]), tree_rss_mib(target["pid"], "VmHWM")
    print(f"amplification: 16 connections x 5 rounds, frames declaring {corpus.max_wh[0]}x{corpus.max_wh[1]} "
          f"with one row ({len(spec.body)} byte body)", flush=True)
    sampler.set_phase("amplification", lambda: stats.done)
    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        for _ in range(5):
            for outcome in pool.map(lambda client: client.send(spec), clients):
                stats.record(spec, outcome)
    time.sleep(1.0)  # one more sample or two after the last answer
    sampler.set_phase("idle")
    for client in clients:
        client.close()
    peaks = [s[3] for s in sampler.phase_samples("amplification")]
    return {"probe": probe, "body_bytes": len(spec.body), "seconds": round(time.monotonic() - t0, 2),
            "rss_before_mib": round1(before), "peak_rss_mib": max(peaks) if peaks else None,
            "hwm_before_mib": round1(hwm_before), "hwm_after_mib": round1(tree_rss_mib(target["pid"], "VmHWM")),
            **{k: v for k, v in stats.summary().items() if k in ("by_kind", "failures", "failure_examples",
                                                                  "slowest_refusal", "requests")}}


def stall_socket(host: str, port: int, payload: bytes, cap: float) -> dict:
    """Send ``payload`` and nothing more; wait for a response or a close, at most ``cap`` s."""
    t0 = time.monotonic()
    data, status, outcome = b"", None, "open at cap"
    try:
        sock = socket.create_connection((host, port), timeout=10)
        sock.sendall(payload)
    except OSError as exc:
        return {"outcome": f"connect failed: {type(exc).__name__}", "status": None, "seconds": 0.0}
    try:
        while (remaining := cap - (time.monotonic() - t0)) > 0:
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except OSError:
                outcome = "reset"
                break
            if not chunk:
                outcome = "closed"
                break
            data += chunk
            if status is None and data.startswith(b"HTTP/") and b"\r\n" in data:
                status = int(data.split(b" ", 2)[1])
            if status is not None and b"\r\n\r\n" in data:
                outcome = "answered"
                break
    finally:
        sock.close()
    return {"outcome": outcome, "status": status, "seconds": round(time.monotonic() - t0, 2)}


def stall_probe(target: dict, corpus: Corpus, args, delay: float) -> dict:
    time.sleep(delay)
    spec = corpus.valid(random.Random(f"{args.seed}:stall:{delay}"))
    outcome = Client(target["host"], target["port"], args.timeout, args.api_key).send(spec)
    return {"at_s": delay, "status": outcome.status, "error": outcome.error, "seconds": round(outcome.seconds, 3)}


def run_stalls(target: dict, corpus: Corpus, args) -> dict:
    host, port, cap = target["host"], target["port"], args.stall_cap
    header_stalls = [b"POST /predict HTTP/1.1\r\nHost: x\r\n", b"POST /predict HTT"]  # in the headers, request line
    body_stall = (b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n" + b'{"images":')
    print(f"stalls: 8 sockets stopping in the request line or headers, 8 in the body (cap {cap:.0f} s), "
          f"a valid request at 2 s and {args.stall_bound / 2:.0f} s", flush=True)
    with ThreadPoolExecutor(18) as pool:
        heads = [pool.submit(stall_socket, host, port, header_stalls[k % 2], cap) for k in range(8)]
        bodies = [pool.submit(stall_socket, host, port, body_stall, cap) for _ in range(8)]
        probes = [pool.submit(stall_probe, target, corpus, args, d) for d in (2.0, args.stall_bound / 2)]
        result = {"headers": [f.result() for f in heads], "body": [f.result() for f in bodies],
                  "probes": [f.result() for f in probes]}
    stalls = result["headers"] + result["body"]
    result["cap_s"] = cap
    result["bound_s"] = args.stall_bound
    result["max_close_s"] = max(s["seconds"] for s in stalls)
    result["all_closed_within_bound"] = all(s["outcome"] in ("closed", "answered", "reset")
                                            and s["seconds"] <= args.stall_bound for s in stalls)
    result["probes_ok"] = all(p["status"] == 200 and p["seconds"] < MAX_REFUSAL_S for p in result["probes"])
    return result


def run_sigterm(server: Server, corpus: Corpus, args, n_requests: int, double: bool) -> dict:
    """``n_requests`` valid requests in flight, then SIGTERM (twice when ``double``)."""
    stats = Stats("sigterm")
    rng = random.Random(f"{args.seed}:sigterm:{n_requests}")
    specs = [corpus.valid(rng) for _ in range(n_requests)]
    outcomes: list[Outcome | None] = [None] * n_requests

    def send(k: int) -> None:
        outcomes[k] = Client("127.0.0.1", server.port, args.timeout, args.api_key).send(specs[k])

    threads = [threading.Thread(target=send, args=(k,), daemon=True) for k in range(n_requests)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    t_signal = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    if double:
        time.sleep(0.1)
        server.proc.send_signal(signal.SIGTERM)
    try:
        server.proc.wait(timeout=args.exit_timeout)
        exit_s = round(time.monotonic() - t_signal, 2)
    except subprocess.TimeoutExpired:
        exit_s = None
        server.proc.kill()
        server.proc.wait()
    for t in threads:
        t.join(timeout=args.timeout + 5)
    labels = []
    for spec, outcome in zip(specs, outcomes, strict=True):
        outcome = outcome or Outcome(error="HANG")
        stats.record(spec, outcome, shutdown=True)
        labels.append(outcome.error or outcome.status)
    rc = server.proc.returncode if exit_s is not None else None
    return {"requests": n_requests, "signals": 2 if double else 1, "statuses": labels,
            "all_200": all(label == 200 for label in labels), "exit_s": exit_s, "returncode": rc,
            "exit_status": format_exit(rc) + ("" if exit_s is not None else " (killed with SIGKILL)"),
            "failures": dict(stats.failures), "failure_examples": stats.examples}


# ------------------------------------------------------------------------------------------------ report

def criteria(campaign: dict, amplification: dict | None, rss: dict, stalls: dict | None,
             sigterm: dict | None) -> dict[str, dict]:
    fails = Counter(campaign["failures"])
    if amplification:
        fails.update(amplification["failures"])
    out = {
        "no_unexpected_5xx": (fails["unexpected_5xx"] == 0, f"{fails['unexpected_5xx']} unexpected 5xx"),
        "no_hangs": (fails["hang"] == 0, f"{fails['hang']} hangs"),
        "slowest_refusal_under_5s": (campaign["slowest_refusal"]["seconds"] < MAX_REFUSAL_S,
                                     f"{campaign['slowest_refusal']['seconds']:.3f} s"),
        "no_422": (fails["status_422"] == 0, f"{fails['status_422']} x 422"),
        "json_error_bodies": (fails["bad_error_body"] == 0, f"{fails['bad_error_body']} refusals without a JSON "
                                                            "error object"),
        "no_leaks_in_errors": (fails["leak_in_error"] == 0, f"{fails['leak_in_error']} with traceback/path"),
        "determinism": (fails["nondeterministic"] == 0,
                        f"{campaign['determinism']['compared']} repeats compared, "
                        f"{campaign['determinism']['mismatched']} differ"),
        "no_forbidden_accepts": (fails["forbidden_accept"] == 0, f"{fails['forbidden_accept']} hostile requests "
                                                                 "that must be refused got 200"),
    }
    other = {k: v for k, v in fails.items() if k in ("conn_error", "unexpected_status", "valid_refused",
                                                     "wrong_status", "bad_retry_after", "bad_x_request_id",
                                                     "bad_200_body", "seed_not_echoed")}
    out["protocol_checks"] = (not other, ", ".join(f"{k} {v}" for k, v in other.items()) or "ok")
    if rss.get("measured") and rss.get("drift_pct") is not None:
        out["rss_drift_under_5pct"] = (rss["drift_pct"] < MAX_DRIFT_PCT, f"{rss['drift_pct']:+.2f} %")
    else:
        out["rss_drift_under_5pct"] = (None, "not measured (no server pid)")
    if not stalls:
        out["stalls_closed_within_bound"] = (None, "not run")
    else:
        probes = [p["status"] or p["error"] for p in stalls["probes"]]
        out["stalls_closed_within_bound"] = (stalls["all_closed_within_bound"] and stalls["probes_ok"],
                                             f"max {stalls['max_close_s']:.1f} s (bound {stalls['bound_s']:.0f} s),"
                                             f" all closed: {stalls['all_closed_within_bound']}; valid probes "
                                             f"during the stall: {probes} ({'ok' if stalls['probes_ok'] else 'FAILED'}"
                                             ", 200 in < 5 s wanted)")
    if not sigterm:
        out["sigterm_drains_in_flight"] = (None, "not run (--url, or --no-sigterm)")
    else:
        single = sigterm["single"]
        out["sigterm_drains_in_flight"] = (single["all_200"] and single["exit_s"] is not None,
                                           f"{single['statuses']}, exit {single['exit_status']} "
                                           f"after {single['exit_s']} s")
    return {name: {"pass": None if ok is None else bool(ok), "detail": detail} for name, (ok, detail) in out.items()}


def print_kinds(by_kind: dict) -> None:
    labels = sorted({label for counts in by_kind.values() for label in counts}, key=lambda x: (len(x), x))
    print(f"  {'kind':<28}" + "".join(f"{label:>8}" for label in labels))
    for kind, counts in by_kind.items():
        print(f"  {kind:<28}" + "".join(f"{counts.get(label, ''):>8}" for label in labels))


def print_summary(result: dict) -> None:
    c = result["campaign"]
    print("\n==================== stress summary ====================")
    print(f"server: {result['target']}  version {result['version']}  cpu {result['cpu']}")
    print(f"campaign: {c['requests']} requests in {c['seconds']} s")
    print_kinds(c["by_kind"])
    print(f"  failures: {c['failures'] or 'none'}")
    for ex in c["failure_examples"][:12]:
        print(f"    - {ex['reason']}: kind {ex['kind']} #{ex['index']} status {ex['status'] or ex['error']}"
              f"{' (' + ex['note'] + ')' if ex['note'] else ''}: {ex['body'][:160]!r}")
    print(f"  unexpected 5xx by kind: {c['unexpected_5xx_by_kind'] or 'none'}")
    print(f"  accepted mutations (200): {c['accepted_mutations'] or 'none'}")
    lat = c["valid_latency_ms"]
    print(f"  valid latency: n={lat['n']} p50 {lat['p50']} ms, p99 {lat['p99']} ms, max {lat['max']} ms")
    print(f"  slowest refusal: {c['slowest_refusal']}")
    print(f"  determinism: {c['determinism']}")
    rss = result["rss"]
    if rss.get("measured"):
        print(f"RSS: after {rss['warm_mark_requests']} requests {rss['after_warmup_mib']} MiB, final "
              f"{rss['final_mib']} MiB, max {rss['max_mib']} MiB (sampled; VmHWM {rss['hwm_mib']} MiB), "
              f"drift {rss['drift_pct']:+.2f} %")
    else:
        print("RSS: not measured (no server pid)")
    amp = result.get("amplification")
    if amp:
        print(f"amplification: probe {amp['probe']['status']} ({amp['probe']['rule'][:100]!r}), statuses "
              f"{amp['by_kind']}, failures {amp['failures'] or 'none'}")
        print(f"  peak RSS {amp['peak_rss_mib']} MiB sampled (before {amp['rss_before_mib']} MiB); VmHWM "
              f"{amp['hwm_before_mib']} -> {amp['hwm_after_mib']} MiB")
    stalls = result.get("stalls")
    if stalls:
        for name in ("headers", "body"):
            rows = ", ".join(f"{s['outcome']}{'/' + str(s['status']) if s['status'] else ''}@{s['seconds']}s"
                             for s in stalls[name])
            print(f"stalls ({name}): {rows}")
        print(f"  probes during stall: {stalls['probes']}")
    for name, sig in (result.get("sigterm") or {}).items():
        print(f"SIGTERM ({name}): {sig['requests']} in flight, {sig['signals']} signal(s): statuses "
              f"{sig['statuses']}, exit after {sig['exit_s']} s with {sig['exit_status']}")
    print("criteria:")
    for name, verdict in result["criteria"].items():
        word = {True: "PASS", False: "FAIL", None: "SKIP"}[verdict["pass"]]
        print(f"  {word}  {name}: {verdict['detail']}")
    print(f"overall: {'PASS' if result['pass'] else 'FAIL'}   (json: {result['json']})")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


# ------------------------------------------------------------------------------------------------ main

def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", choices=("n15", "n17"), default="n15", help="GR00T_VERSION of the started server")
    ap.add_argument("--weights", default="synthetic:tiny", help="GR00T_WEIGHTS (default synthetic:tiny)")
    ap.add_argument("--cache", help="GR00T_CACHE (default: a temporary one, deleted at the end)")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="extra server environment")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs uvicorn")
    ap.add_argument("--http-protocol", default="gr00t_p150.server.protocol:GuardedH11Protocol",
                    help="uvicorn --http value (h11 for the stock protocol)")
    ap.add_argument("--port", type=int, default=0, help="port of the started server (default: a free one)")
    ap.add_argument("--url", help="attack this running server instead of starting one")
    ap.add_argument("--pid", type=int, help="with --url: the server's pid, for RSS sampling")
    ap.add_argument("--api-key", help="send Authorization: Bearer KEY")
    ap.add_argument("--boot-timeout", type=float, default=600.0)
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=30.0, help="client timeout per request; past it = HANG")
    ap.add_argument("--valid-fraction", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0, help="seed of the mutation choices")
    ap.add_argument("--amplification", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--stalls", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--stall-bound", type=float, default=40.0, help="stalled sockets must be closed by then (s)")
    ap.add_argument("--stall-cap", type=float, default=60.0, help="stop waiting on a stalled socket after (s)")
    ap.add_argument("--sigterm", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--double-sigterm", action=argparse.BooleanOptionalAction, default=None,
                    help="also: a fresh server, 8 requests, SIGTERM twice (default on, off with --quick)")
    ap.add_argument("--exit-timeout", type=float, default=120.0, help="wait this long for exit after SIGTERM")
    ap.add_argument("--progress-every", type=int, default=1000)
    ap.add_argument("--out-dir", help="server logs go here (default: a temporary directory)")
    ap.add_argument("--json", help="result file (default benchmarks/results/stress_<version>.json)")
    ap.add_argument("--quick", action="store_true",
                    help="self-test: 600 requests, concurrency 4, stall cap 45 s, no double SIGTERM")
    args = ap.parse_args(argv)
    if args.quick:
        args.requests, args.concurrency = 600, 4
        args.double_sigterm = bool(args.double_sigterm)
        args.stall_cap = min(args.stall_cap, max(45.0, args.stall_bound + 5))
        args.progress_every = min(args.progress_every, 100)
    args.double_sigterm = args.double_sigterm is not False
    args.out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="stress_server_"))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    args.own_cache = not args.cache  # a temporary GR00T_CACHE is deleted at the end (the logs stay)
    args.cache = Path(args.cache) if args.cache else args.out_dir / "cache"
    args.json = Path(args.json) if args.json else REPO / "benchmarks" / "results" / f"stress_{args.version}.json"
    return args


def start_server(args, name: str) -> Server | None:
    server = Server(args, args.port or free_port(), args.out_dir / f"{name}.log")
    server.start()
    if server.wait_ready(args.boot_timeout):
        return server
    server.stop()
    return None


def target_of(args, server: Server | None) -> dict:
    if server is not None:
        return {"host": "127.0.0.1", "port": server.port, "pid": server.pid}
    url = urllib.parse.urlsplit(args.url)
    return {"host": url.hostname or "127.0.0.1", "port": url.port or 80, "pid": args.pid}


def fetch_corpus(target: dict, args) -> Corpus | None:
    try:
        status, demo = get_json(target["host"], target["port"], "/demo", auth=args.api_key)
        _, info = get_json(target["host"], target["port"], "/info", auth=args.api_key)
    except OSError as exc:
        print(f"stress_server: server unreachable: {exc}", file=sys.stderr)
        return None
    if status != 200 or "request" not in demo:
        print(f"stress_server: GET /demo answered {status}", file=sys.stderr)
        return None
    if info.get("version") and info["version"] != args.version:
        args.version = info["version"]
    return Corpus(demo["request"], info.get("contract") or {}, args.seed, args.valid_fraction)


def run_phases(args, server: Server | None, result: dict) -> None:
    target = target_of(args, server)
    result["target"] = f"http://{target['host']}:{target['port']} (pid {target['pid']})"
    corpus = fetch_corpus(target, args)
    if corpus is None:
        raise SystemExit(2)
    result["mutation_kinds"] = sorted(corpus.kinds)
    sampler = RssSampler(target["pid"])
    sampler.start()
    stats, result["rss"] = run_campaign(target, corpus, args, sampler)
    result["campaign"] = stats.summary()
    if args.amplification:
        result["amplification"] = run_amplification(target, corpus, args, sampler)
    sampler.stop_event.set()
    if args.stalls:
        result["stalls"] = run_stalls(target, corpus, args)
    if server is not None and args.sigterm:
        result["sigterm"] = {"single": run_sigterm(server, corpus, args, 4, double=False)}
        print(f"SIGTERM: exit {result['sigterm']['single']['exit_status']} "
              f"after {result['sigterm']['single']['exit_s']} s", flush=True)
        if args.double_sigterm:
            again = start_server(args, "server_double_sigterm")
            if again is not None:
                try:
                    result["sigterm"]["double"] = run_sigterm(again, corpus, args, 8, double=True)
                finally:
                    again.stop()


def redacted(argv: list[str]) -> list[str]:
    """The command line without the value of --api-key or of --env settings (they may hold secrets)."""
    out = list(argv)
    for k, item in enumerate(out[:-1]):
        if item == "--api-key":
            out[k + 1] = "***"
        elif item == "--env":
            out[k + 1] = out[k + 1].partition("=")[0] + "=***"
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    result = {"command": redacted(sys.argv), "date": now,
              "cpu": cpu_model(), "version": args.version, "weights": args.weights,
              "http_protocol": args.http_protocol if not args.url else None, "out_dir": str(args.out_dir),
              "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                          if k not in ("api_key", "env")}}
    server = None
    if not args.url:
        server = start_server(args, "server")
        if server is None:
            return 2
    try:
        run_phases(args, server, result)
    finally:
        if server is not None:
            server.stop()
        if args.own_cache:
            shutil.rmtree(args.cache, ignore_errors=True)
    result["criteria"] = criteria(result["campaign"], result.get("amplification"), result["rss"],
                                  result.get("stalls"), result.get("sigterm"))
    result["pass"] = all(v["pass"] is not False for v in result["criteria"].values())
    result["json"] = str(args.json)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1, default=str))
    print_summary(result)
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
