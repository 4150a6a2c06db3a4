# SPDX-License-Identifier: Apache-2.0
"""The request/response contract of this server as data (for /info and clients), with the per-version
prose from the version registry."""

from __future__ import annotations

from typing import Any

from .settings import ServerConfig


def model_name(version: str) -> str:
    """The served package's name, as the published manifests report it; ``backend`` says where it ran."""
    from models.experimental.gr00t.common.versions import SPECS

    return SPECS[version].model_name if version in SPECS else "GR00T"


def contract(c: ServerConfig, lay, horizon: int, action_dim: int) -> dict[str, Any]:
    """The request/response contract of this server, as data (for /info and clients)."""
    from models.experimental.gr00t.common.preprocessing import MAX_SIDE, MIN_SIDE
    from models.experimental.gr00t.common.versions import get_spec

    text = get_spec(c.version).contract
    return {
        "embodiment": lay.embodiment, "embodiment_id": lay.embodiment_id, "layout": lay.name,
        "images": {"cameras": list(lay.cameras), "frames_per_camera": lay.frames_per_camera,
                   "format": "base64 PNG or JPEG, RGB" + (" (one string, or a list of one)"
                                                         if lay.frames_per_camera == 1
                                                         else f" (a list of {lay.frames_per_camera}: t-15 then t)"),
                   "side_px": [MIN_SIDE, MAX_SIDE],
                   "width_over_height": list(lay.aspect_range) if lay.aspect_range else None,
                   "chain": text.image_chain},
        "state": {"groups": dict(lay.state_groups),
                  "format": "{group: [[floats]]} (one time step) or {group: [floats]}",
                  "units": text.state_units, "dtypes": ["float64", "float32"], "default_dtype": "float64"},
        "instruction": {"max_tokens": lay.max_text_tokens, "counted": text.instruction_counted,
                        "over_limit": "refused with 400, never truncated"},
        "noise": {"shape": [horizon, action_dim], "default_seed": lay.default_seed,
                  "seed_range": [0, 2**63 - 1], "generator": f"g = torch.Generator('cpu').manual_seed(seed); "
                               f"torch.randn((1, {horizon}, {action_dim}), generator=g, dtype=torch.float32)"},
        "actions": {"groups": dict(lay.action_groups), "horizon": horizon, "units": text.action_units},
        "max_body_bytes": c.max_body_bytes,
    }
