# SPDX-License-Identifier: Apache-2.0
"""One robot observation, checked against a layout before any model work.

The JSON shape is the server's request: ``images`` {camera: base64 PNG/JPEG, or a list of them, one
per frame}, ``state`` {group: [[floats]] (one time step) or [floats]}, ``instruction`` (text). Every
problem raises ``InputError`` naming the field and the rule.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InputError
from .host_threads import frame_map
from .layouts import Layout
from .preprocessing import check_side, decode_image
from .prompts import check_instruction_length

_SURROGATE = re.compile("[\ud800-\udfff]")


FLOAT32_MAX = float(np.finfo(np.float32).max)  # the model computes in float32: larger values overflow


@dataclass(frozen=True)
class Observation:
    images: dict[str, list[np.ndarray]]  # camera → frames, each uint8 [H, W, 3]
    state: dict[str, np.ndarray]  # group → float64 [dim]
    instruction: str

    def pixel_bytes(self) -> int:
        """Bytes held by the decoded frames."""
        return sum(frame.nbytes for frames in self.images.values() for frame in frames)

    def received_hw(self) -> dict[str, dict[str, Any]]:
        return {cam: {"frames": len(frames), "received_hw": list(frames[0].shape[:2])}
                for cam, frames in self.images.items()}


def _exact_keys(field: str, given: Any, expected: list[str], what: str) -> None:
    if not isinstance(given, dict):
        raise InputError(field, f"must be an object keyed by {what} {expected}")
    unknown = [k for k in given if k not in expected]
    if unknown:
        raise InputError(f"{field}.{unknown[0]}", f"unknown {what}; this layout expects {expected}")
    missing = [k for k in expected if k not in given]
    if missing:
        raise InputError(f"{field}.{missing[0]}", f"missing; this layout expects {expected}")


def parse_state(state: Any, layout: Layout) -> dict[str, np.ndarray]:
    _exact_keys("state", state, [n for n, _ in layout.state_groups], "state group")
    out = {}
    for name, dim in layout.state_groups:
        field = f"state.{name}"
        value = state[name]
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
            value = value[0]  # one time step, [[...]]
        if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  for v in value):
            raise InputError(field, f"must be a list of {dim} numbers (or [[{dim} numbers]] for one time step)")
        if len(value) != dim:
            raise InputError(field, f"has {len(value)} values; expected {dim}")
        if not all(math.isfinite(v) and abs(v) <= FLOAT32_MAX for v in value):
            raise InputError(field, "contains a value that is not finite in float32")
        out[name] = np.asarray(value, dtype=np.float64)
    return out


def check_aspect(field: str, h: int, w: int, layout: Layout) -> None:
    """A layout with an aspect range (DROID: landscape near 16:9, the shape the model saw) refuses other frames;
    decoding asks this of the header, before any pixel is decoded."""
    if layout.aspect_range and not (h > 0 and layout.aspect_range[0] <= w / h <= layout.aspect_range[1]):
        raise InputError(field, f"is {w}x{h} (width/height {w / h:.4f}); this layout takes landscape frames "
                                f"with width/height in {list(layout.aspect_range)}")


def parse_images(images: Any, layout: Layout) -> dict[str, list[np.ndarray]]:
    """The frames of every camera, checked and decoded (side by side on the frame workers: ``frame_map``);
    the error raised is the one a camera-by-camera, frame-by-frame loop meets first."""
    _exact_keys("images", images, list(layout.cameras), "camera")
    jobs, count_error = [], None
    for cam in layout.cameras:
        value = images[cam]
        frames = value if isinstance(value, list) else [value]
        if len(frames) != layout.frames_per_camera:
            count_error = InputError(f"images.{cam}", f"has {len(frames)} frame(s); this layout takes exactly "
                                                      f"{layout.frames_per_camera}")
            break  # the frames of the cameras before it are still checked first, as the loop would
        jobs += [(f"images.{cam}" if layout.frames_per_camera == 1 else f"images.{cam}[{i}]", frame)
                 for i, frame in enumerate(frames)]
    decoded = frame_map(lambda job: _frame(*job, layout), jobs)
    if count_error is not None:
        raise count_error
    n = layout.frames_per_camera
    return {cam: decoded[k * n:(k + 1) * n] for k, cam in enumerate(layout.cameras)}


def _frame(field: str, frame: Any, layout: Layout) -> np.ndarray:
    """One frame of a request: a decoded uint8 RGB array (library use) checked, or a base64 image decoded."""
    if isinstance(frame, np.ndarray):  # already decoded (library use)
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
            raise InputError(field, "must be a uint8 [H, W, 3] RGB array")
        check_side(field, frame.shape[0], frame.shape[1])
        check_aspect(field, frame.shape[0], frame.shape[1], layout)
        return frame
    if isinstance(frame, str):
        return decode_image(frame, field, check=lambda h, w: check_aspect(field, h, w, layout))
    raise InputError(field, "must be a base64-encoded PNG or JPEG string")


def parse_observation(data: Any, layout: Layout) -> Observation:
    if not isinstance(data, dict):
        raise InputError("observation", "must be a JSON object with images, state and instruction")
    for key in ("images", "state", "instruction"):
        if key not in data:
            raise InputError(key, "missing")
    instruction = data["instruction"]
    if not isinstance(instruction, str) or not instruction.strip():
        raise InputError("instruction", "must be a non-empty string")
    check_instruction_length(instruction, layout.max_text_tokens)  # before any image is decoded
    if _SURROGATE.search(instruction):  # e.g. raw bytes ED BF BF, which Python's JSON decoder lets through
        raise InputError("instruction", "contains a lone UTF-16 surrogate (U+D800-U+DFFF): not valid Unicode text")
    state = parse_state(data["state"], layout)
    images = parse_images(data["images"], layout)
    return Observation(images=images, state=state, instruction=instruction)
