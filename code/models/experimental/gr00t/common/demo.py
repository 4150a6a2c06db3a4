# SPDX-License-Identifier: Apache-2.0
"""The shipped demo request of each version (``code/models/experimental/gr00t/demo/<version>/``, written by
``demo/make_demo.py`` from the version's ``VersionSpec.demo`` scene)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parents[1] / "demo"


def demo_path(version: str, layout: str | None = None, demo_dir: Path = DEMO_DIR) -> Path:
    """The folder of ``version``'s demo for ``layout`` (its default layout when None): ``demo/<version>/``, or
    ``demo/<version>_<layout>/`` for a version's other served layouts."""
    from .versions import get_spec

    return demo_dir / get_spec(version).demo_dir(layout)


def load_demo_request(version: str, layout: str | None = None) -> dict:
    """``version``'s shipped demo request for ``layout`` (its default layout when None)."""
    return read_demo_request(demo_path(version, layout))


def read_demo_request(d: Path) -> dict:
    """The demo observation in folder ``d`` as a client sends it: frames base64-encoded (a single frame per camera as
    a plain string, several as a list), plus the demo's explicit initial noise."""
    obs = json.loads((d / "observation.json").read_text())
    images = {}
    for cam, frames in obs["images"].items():
        encoded = [base64.b64encode((d / f).read_bytes()).decode() for f in frames]
        images[cam] = encoded[0] if len(encoded) == 1 else encoded
    noise = json.loads((d / "noise.json").read_text())["noise"]
    return {"images": images, "state": obs["state"], "instruction": obs["instruction"], "noise": noise}
