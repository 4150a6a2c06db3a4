# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the device tests (tests/pcc, tests/perf): a real p150a or a clean skip.

They need a Tenstorrent card (a /dev/tenstorrent* node, not the mock: a mock computes nothing).
Weights: ``GR00T_TEST_WEIGHTS`` (a GR00T N1.5 snapshot directory, e.g. the real checkpoint) or, by
default, the full-size synthetic checkpoint generated once into ``$GR00T_CACHE/synthetic``. How to run:
README, "TT-NN port" → "On a p150a".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def require_device() -> None:
    from models.experimental.gr00t.tt.runner import device_present

    if os.environ.get("TT_METAL_MOCK_CLUSTER_DESC_PATH"):
        pytest.skip("device tests need a real p150a; this process is configured for the mock P150")
    if not device_present():
        pytest.skip("no Tenstorrent device (/dev/tenstorrent* absent): device tests run on a p150a only")


@pytest.fixture(scope="session")
def p150():
    require_device()
    from models.experimental.gr00t.tt.runner import close_model_device, open_model_device

    device = open_model_device((1, 1))
    yield device
    close_model_device(device)


@pytest.fixture(scope="session")
def device_checkpoint() -> Path:
    require_device()
    explicit = os.environ.get("GR00T_TEST_WEIGHTS")
    if explicit:
        return Path(explicit)
    from models.experimental.gr00t.common.synthetic import synthetic_info, write_checkpoint

    cache = Path(os.environ.get("GR00T_DEVICE_TEST_CACHE") or Path.home() / ".cache" / "gr00t-p150")
    path = cache / "synthetic" / "n15-full-seed0"
    if synthetic_info(path) is None:
        write_checkpoint(path, scale="full", seed=0, version="n15")
    return path


@pytest.fixture(scope="session")
def tt_cache_root() -> Path:
    return Path(os.environ.get("GR00T_TT_CACHE") or Path.home() / ".cache" / "gr00t-p150" / "tt")


def build_policy(device, checkpoint: Path, cache_root: Path, traced: bool, dtype_policy: str = "mixed_dit"):
    from models.experimental.gr00t.tt.policy import TTPolicy
    from models.experimental.gr00t.tt.ttnn_policy import TTGr00tPolicy

    return TTGr00tPolicy.build(checkpoint, device, cache_root=cache_root, weights_id=f"device-test-{checkpoint.name}",
                               policy=TTPolicy(dtype_policy=dtype_policy), traced=traced)


def observations(layout):
    """Two different GR1 observations: the shipped demo (A) and a variant (B: other frame, state, task)."""
    import numpy as np

    from gr00t_p150.server.demo import load_demo_request
    from models.experimental.gr00t.common.observation import parse_observation

    a = load_demo_request("n15")
    b = {**a, "instruction": "put the red cube into the basket",
         "state": {k: (np.asarray(v) * 0.5 + 0.1).tolist() for k, v in a["state"].items()}}
    return parse_observation(a, layout), parse_observation(b, layout), a["noise"]
