# SPDX-License-Identifier: Apache-2.0
"""Pick the reference policy from what a checkpoint says it is (``config.json`` ``model_type``)."""

from __future__ import annotations

import json
from pathlib import Path

from ..common.errors import ConfigError
from ..common.layouts import DEFAULT_LAYOUT

MODEL_TYPES = {"gr00t_n1_5": "n15", "Gr00tN1d7": "n17"}


def checkpoint_version(directory: str | Path) -> str:
    path = Path(directory) / "config.json"
    try:
        model_type = json.loads(path.read_text()).get("model_type")
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not found or not JSON ({exc.__class__.__name__})") from None
    if model_type not in MODEL_TYPES:
        raise ConfigError(f"{path}: model_type {model_type!r} is not a supported GR00T version ({sorted(MODEL_TYPES)})")
    return MODEL_TYPES[model_type]


def load_reference_policy(directory: str | Path, version: str | None = None, layout: str | None = None,
                          device: str = "cpu"):
    """The fp32 reference policy for the checkpoint in ``directory``; ``version`` must match it if given."""
    found = checkpoint_version(directory)
    if version is not None and version != found:
        raise ConfigError(f"{directory}: holds a {found} checkpoint, but {version} was requested")
    if found == "n15":
        from .torch_policy import ReferencePolicy as cls  # noqa: PLC0415
    else:
        from .torch_policy_n17 import ReferencePolicyN17 as cls  # noqa: PLC0415
    return cls.from_checkpoint(directory, layout=layout or DEFAULT_LAYOUT[found], device=device)
