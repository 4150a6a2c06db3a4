# SPDX-License-Identifier: Apache-2.0
"""Pick the reference policy from what a checkpoint says it is (``config.json`` ``model_type``)."""

from __future__ import annotations

import json
from pathlib import Path

from ..common.errors import ConfigError
from ..common.versions import get_spec, load, spec_for_model_type


def checkpoint_version(directory: str | Path) -> str:
    path = Path(directory) / "config.json"
    try:
        model_type = json.loads(path.read_text()).get("model_type")
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not found or not JSON ({exc.__class__.__name__})") from None
    return spec_for_model_type(model_type, path).name


def load_reference_policy(directory: str | Path, version: str | None = None, layout: str | None = None,
                          device: str = "cpu", dtypes_of=None):
    """The fp32 reference policy for the checkpoint in ``directory``; ``version`` must match it if given.
    ``dtypes_of``: parts loaded in another dtype (a mixed-precision fast path built on it, never the golden)."""
    found = checkpoint_version(directory)
    if version is not None and version != found:
        raise ConfigError(f"{directory}: holds a {found} checkpoint, but {version} was requested")
    spec = get_spec(found)
    return load(spec.policy_cls).from_checkpoint(directory, layout=layout or spec.layout, device=device,
                                                 dtypes_of=dtypes_of)
