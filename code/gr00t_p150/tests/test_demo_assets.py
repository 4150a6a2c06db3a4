# SPDX-License-Identifier: Apache-2.0
"""The shipped demo assets are what make_demo.py produces today, and the demo prompts are the
published ones (N1.5: seq_len 296, 14 instruction tokens; N1.7: seq_len 469)."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from models.experimental.gr00t.common.demo import DEMO_DIR, load_demo_request

MAKE_DEMO = DEMO_DIR / "make_demo.py"


def test_demo_assets_are_complete_and_published_shaped():
    d = DEMO_DIR / "n15"
    for name in ("observation.json", "noise.json", "expected.json", "frames/ego_view_t0.png"):
        assert (d / name).is_file(), name
    request = load_demo_request("n15")
    assert request["instruction"] == "pick the pear from the counter and place it in the plate"
    assert len(request["noise"]) == 16 and all(len(row) == 32 for row in request["noise"])
    expected = json.loads((d / "expected.json").read_text())
    assert (expected["seq_len"], expected["prompt_tokens"]) == (296, 14)
    assert expected["weights"]["source"] == "synthetic:tiny"


def test_n17_demo_assets_are_complete_and_published_shaped():
    d = DEMO_DIR / "n17"
    frames = [f"frames/{cam}_{t}.png" for cam in ("exterior_image_1_left", "wrist_image_left") for t in ("tm15", "t0")]
    for name in ("observation.json", "noise.json", "expected.json", *frames):
        assert (d / name).is_file(), name
    request = load_demo_request("n17")
    assert set(request["images"]) == {"exterior_image_1_left", "wrist_image_left"}
    assert all(len(v) == 2 for v in request["images"].values())
    assert request["instruction"] == "Put the blue block in the green bowl"
    assert len(request["noise"]) == 40 and all(len(row) == 132 for row in request["noise"])
    expected = json.loads((d / "expected.json").read_text())
    assert (expected["seq_len"], expected["prompt_tokens"]) == (469, 8)  # as in the published response


@pytest.mark.golden
def test_demo_assets_are_reproducible_by_the_script():
    """Inputs byte-exact; expected.json within the cross-machine rule, with the max |d| printed."""
    proc = subprocess.run([sys.executable, str(MAKE_DEMO), "--check"], capture_output=True, text=True, timeout=300,
                          env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "up to date" in proc.stdout
    for version in ("n15", "n17"):
        assert re.search(rf"^{version}/expected.json: (bit-identical|max \|d\| \S+ )", proc.stdout, re.M), proc.stdout


def test_the_check_refuses_a_golden_off_by_more_than_the_rule_or_with_other_metadata():
    spec = importlib.util.spec_from_file_location("make_demo", MAKE_DEMO)
    make_demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_demo)
    shipped = json.loads((DEMO_DIR / "n15" / "expected.json").read_text())
    fresh = copy.deepcopy(shipped)
    fresh["actions"]["left_arm"][3][2] += 4e-6
    assert make_demo.compare_expected(fresh, shipped)[0]
    fresh["actions"]["left_arm"][3][2] += 8e-6  # 1.2e-5 off in total: over the 1e-5 rule
    ok, detail = make_demo.compare_expected(fresh, shipped)
    assert not ok and "left_arm" in detail and "1.2e-05" in detail
    bumped = copy.deepcopy(shipped)
    bumped["seq_len"] += 1
    assert make_demo.compare_expected(bumped, shipped) == (False, "fields differ: ['seq_len']")
