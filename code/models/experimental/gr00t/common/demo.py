# SPDX-License-Identifier: Apache-2.0
"""The shipped demo request of each version (``code/models/experimental/gr00t/demo/<version>/``, written by
``demo/make_demo.py`` from the version's ``VersionSpec.demo`` scene)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parents[1] / "demo"


def load_demo_request(version: str, demo_dir: Path = DEMO_DIR) -> dict:
    """The demo observation as a client sends it: frames base64-encoded (a single frame per camera as a
    plain string, several as a list), plus the demo's explicit initial noise."""
    d = demo_dir / version
    obs = json.loads((d / "observation.json").read_text())
    images = {}
    for cam, frames in obs["images"].items():
        encoded = [base64.b64encode((d / f).read_bytes()).decode() for f in frames]
        images[cam] = encoded[0] if len(encoded) == 1 else encoded
    noise = json.loads((d / "noise.json").read_text())["noise"]
    return {"images": images, "state": obs["state"], "instruction": obs["instruction"], "noise": noise}
