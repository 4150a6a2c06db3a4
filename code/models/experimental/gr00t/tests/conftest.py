# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: an isolated cache, each version's tiny synthetic checkpoint and its reference policy, and a
deterministic GR1 observation."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Tokenizer and synthetic caches go to a per-run temp dir, never the user's home."""
    os.environ["GR00T_CACHE"] = str(tmp_path_factory.mktemp("gr00t-cache"))
    os.environ.pop("GR00T_TOKENIZER_DIR_N15", None)
    torch.set_num_threads(2)


class PerVersion(dict):
    """version → a value made by ``make(version)`` on first use, so a session builds only the versions its
    tests ask for, once."""

    def __init__(self, make):
        super().__init__()
        self._make = make

    def __missing__(self, version: str):
        value = self[version] = self._make(version)
        return value


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """Each version's tiny synthetic checkpoint (seed 0), written once per session: ``tiny_checkpoints["n17"]``.
    Tests only read it; a test that edits one copies it first."""
    from models.experimental.gr00t.common.synthetic import write_checkpoint

    return PerVersion(lambda version: write_checkpoint(tmp_path_factory.mktemp("ckpt") / f"{version}-tiny",
                                                       scale="tiny", seed=0, version=version, log=lambda _: None))


@pytest.fixture(scope="session")
def tiny_policies(tiny_checkpoints):
    """Each version's fp32 reference policy on its tiny checkpoint, loaded once per session."""
    from models.experimental.gr00t.common.versions import get_spec, load

    return PerVersion(lambda version: load(get_spec(version).policy_cls).from_checkpoint(tiny_checkpoints[version]))


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_checkpoints):
    return tiny_checkpoints["n15"]


@pytest.fixture(scope="session")
def tiny_checkpoint_n17(tiny_checkpoints):
    return tiny_checkpoints["n17"]


@pytest.fixture(scope="session")
def tiny_policy(tiny_policies):
    return tiny_policies["n15"]


@pytest.fixture(scope="session")
def tiny_policy_n17(tiny_policies):
    return tiny_policies["n17"]


def make_frame(seed: int = 0, size: tuple[int, int] = (256, 256)) -> np.ndarray:
    """A smooth synthetic scene (gradients + noise), uint8 [H, W, 3]."""
    rng = np.random.default_rng(seed)
    h, w = size
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx / w * 200, yy / h * 200, (xx + yy) / (h + w) * 255], axis=-1)
    return np.clip(base + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)


@pytest.fixture
def gr1_request():
    """Request-shaped observation JSON (base64 PNG), the published demo instruction."""
    from models.experimental.gr00t.common.preprocessing import encode_png

    rng = np.random.default_rng(1)
    return {
        "images": {"ego_view": encode_png(make_frame(0))},
        "state": {name: [rng.uniform(-1.5, 1.5, dim).tolist()]
                  for name, dim in (("left_arm", 7), ("right_arm", 7), ("left_hand", 6), ("right_hand", 6))},
        "instruction": "pick the pear from the counter and place it in the plate",
    }


def randomize_(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Overwrite every parameter with seeded values at a healthy scale (norm gains near 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            x = torch.randn(p.shape, generator=g)
            if p.ndim == 1 and ("norm" in name or "layernorm" in name):
                x = 1.0 + 0.1 * x
            elif p.ndim == 1:
                x = 0.1 * x
            else:
                x = x / (p.shape[1] * (p[0, 0].numel() if p.ndim > 2 else 1)) ** 0.5
            p.copy_(x)
    return module
