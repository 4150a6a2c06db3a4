# SPDX-License-Identifier: Apache-2.0
"""A request's frames are decoded side by side on the frame workers, yet the answer is the loop's: the same
arrays, and for a bad request the error a camera-by-camera, frame-by-frame loop meets first."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from models.experimental.gr00t.common import host_threads
from models.experimental.gr00t.common.errors import InputError
from models.experimental.gr00t.common.layouts import DROID
from models.experimental.gr00t.common.observation import parse_images
from PIL import Image

from ..conftest import make_frame

EXT, WRIST = DROID.cameras


def png(frame: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(params=[1, 2, 4], ids=lambda n: f"{n}-workers")
def workers(request):
    before = host_threads.frame_workers()
    host_threads.set_frame_workers(request.param)
    yield request.param
    host_threads.set_frame_workers(before)


@pytest.fixture(scope="module")
def frames():
    return [make_frame(seed, (180, 320)) for seed in range(4)]


def test_decoded_frames_are_pillows_in_camera_and_frame_order(workers, frames):
    images = {EXT: [png(frames[0]), png(frames[1])], WRIST: [png(frames[2]), frames[3]]}
    out = parse_images(images, DROID)
    assert list(out) == [EXT, WRIST]
    for got, want in zip(out[EXT] + out[WRIST], frames):
        assert got.dtype == np.uint8 and np.array_equal(got, want)


@pytest.mark.parametrize("case, field", [
    # two bad frames: the earlier one in camera/frame order is named, whichever finished first
    ("late_bad_frame_then_small", f"images.{EXT}[1]"),
    # a bad frame before a camera with the wrong number of frames: the frame comes first, as in the loop
    ("bad_frame_then_count", f"images.{EXT}[0]"),
    # the wrong count comes first: the later camera's bad frame is never the answer
    ("count_then_bad_frame", f"images.{EXT}"),
])
def test_the_error_is_the_one_the_loop_meets_first(workers, frames, case, field):
    good = [png(f) for f in frames]
    small = png(make_frame(7, (36, 64)))  # the right aspect, below the minimum side
    images = {
        "late_bad_frame_then_small": {EXT: [good[0], "%%%not-base64%%%"], WRIST: [small, good[3]]},
        "bad_frame_then_count": {EXT: ["%%%", good[1]], WRIST: good[:3]},
        "count_then_bad_frame": {EXT: [good[0]], WRIST: ["%%%", good[1]]},
    }[case]
    with pytest.raises(InputError) as err:
        parse_images(images, DROID)
    assert err.value.field == field
