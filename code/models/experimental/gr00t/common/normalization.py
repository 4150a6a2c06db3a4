# SPDX-License-Identifier: Apache-2.0
"""What every version's state and action handling shares: the accepted state dtypes and splitting a
model-space chunk into the layout's action groups. Each version's statistics, state encoding and
un-normalisation are in ``normalization_n15.py`` / ``normalization_n17.py``."""

from __future__ import annotations

import numpy as np

from .layouts import Layout

STATE_DTYPES = {"float64": np.float64, "float32": np.float32}  # the request's state_dtype choices


def split_actions(chunk: np.ndarray, layout: Layout) -> dict[str, np.ndarray]:
    """[horizon, action_dim] → {group: [horizon, dim]}; trailing padding dims are dropped."""
    out, start = {}, 0
    for name, dim in layout.action_groups:
        out[name] = chunk[:, start:start + dim]
        start += dim
    return out
