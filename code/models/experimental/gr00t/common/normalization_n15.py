# SPDX-License-Identifier: Apache-2.0
"""State encoding and action un-normalisation, with statistics read from the checkpoint.

N1.5 GR1 arms-only (NVIDIA's ``StateActionSinCosTransform`` and the ``min_max`` inverse of
``StateActionTransform``, ``gr00t/data/transform/state_action.py`` on ``n1.5-release``): the state is not
normalised but sin/cos-encoded per group (sin block then cos block), zero-padded to ``max_state_dim``; the
model's action chunk is split into the layout's groups and min–max un-normalised, with no clipping.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .checkpoint import read_json
from .errors import ConfigError, InputError
from .layouts import Layout
from .normalization import STATE_DTYPES, split_actions

METADATA_FILE = "experiment_cfg/metadata.json"


@dataclass(frozen=True)
class ActionStats:
    """Per-group ``min`` / ``max`` arrays (float64) for min–max un-normalisation."""

    minimum: dict[str, np.ndarray]
    maximum: dict[str, np.ndarray]

    @classmethod
    def from_metadata(cls, checkpoint_dir: str | Path, layout: Layout) -> "ActionStats":
        path = Path(checkpoint_dir) / METADATA_FILE
        meta = read_json(path, "the action statistics live there")
        try:
            entry = meta[layout.embodiment]
            stats = entry["statistics"]["action"]
            shapes = entry["modalities"]["action"]
        except (KeyError, TypeError):
            raise ConfigError(f"{path}: no statistics.action / modalities.action "
                              f"for embodiment {layout.embodiment!r}") from None
        lo, hi = {}, {}
        for name, dim in layout.action_groups:
            try:
                declared = list(shapes[name]["shape"])
                lo[name] = np.asarray(stats[name]["min"], dtype=np.float64)
                hi[name] = np.asarray(stats[name]["max"], dtype=np.float64)
            except (KeyError, TypeError):
                raise ConfigError(f"{path}: action group {name!r} lacks shape/min/max "
                                  f"for {layout.embodiment!r}") from None
            if declared != [dim] or lo[name].shape != (dim,) or hi[name].shape != (dim,):
                raise ConfigError(f"{path}: action group {name!r} should have {dim} dims (metadata says {declared})")
        return cls(lo, hi)


def video_resolution(checkpoint_dir: str | Path, layout: Layout) -> dict[str, tuple[int, int]]:
    """``modalities.video.<camera>.resolution`` as {camera: (W, H)}."""
    path = Path(checkpoint_dir) / METADATA_FILE
    try:
        video = json.loads(path.read_text())[layout.embodiment]["modalities"]["video"]
        return {cam: tuple(video[cam]["resolution"]) for cam in layout.cameras}
    except (OSError, KeyError, TypeError, json.JSONDecodeError):
        raise ConfigError(f"{path}: no modalities.video resolution for cameras {list(layout.cameras)}") from None


def encode_state_sin_cos(state: dict[str, np.ndarray], layout: Layout, max_state_dim: int,
                         dtype: str = "float64") -> torch.Tensor:
    """GR1 state → [1, 1, max_state_dim] float32: per group [sin(x), cos(x)] computed in ``dtype``
    (NVIDIA computes in the dataset's dtype, float64 for GR1), groups in layout order, zero-padded."""
    parts = []
    for name, dim in layout.state_groups:
        x = np.asarray(state[name], dtype=STATE_DTYPES[dtype]).reshape(dim)
        parts += [np.sin(x), np.cos(x)]
    vec = np.concatenate(parts)
    if vec.size > max_state_dim:
        raise ConfigError(f"state encodes to {vec.size} dims, more than max_state_dim {max_state_dim}")
    padded = np.zeros(max_state_dim, dtype=vec.dtype)
    padded[: vec.size] = vec
    return torch.from_numpy(padded).to(torch.float32).view(1, 1, max_state_dim)


def encode_state(state: dict[str, np.ndarray], layout: Layout, max_state_dim: int,
                 dtype: str = "float64") -> torch.Tensor:
    if dtype not in STATE_DTYPES:
        raise InputError("state_dtype", f"must be one of {sorted(STATE_DTYPES)}")
    if layout.state_encoding == "sin_cos":
        return encode_state_sin_cos(state, layout, max_state_dim, dtype)
    raise ConfigError(f"layout {layout.name!r}: unsupported state encoding {layout.state_encoding!r}")


def unnormalize_min_max(chunk: np.ndarray, stats: ActionStats, layout: Layout) -> dict[str, np.ndarray]:
    """``a = (x + 1) / 2 · (max − min) + min`` per group, in float64, returned as float32. No
    clipping, and ``min == max`` is not special-cased (as NVIDIA's inverse)."""
    groups = split_actions(np.asarray(chunk, dtype=np.float64), layout)
    return {
        name: ((x + 1.0) / 2.0 * (stats.maximum[name] - stats.minimum[name]) + stats.minimum[name]).astype(np.float32)
        for name, x in groups.items()
    }


def unnormalize(chunk: np.ndarray, stats: ActionStats, layout: Layout) -> dict[str, np.ndarray]:
    if layout.action_normalization == "min_max":
        return unnormalize_min_max(chunk, stats, layout)
    raise ConfigError(f"layout {layout.name!r}: unsupported action normalisation {layout.action_normalization!r}")
