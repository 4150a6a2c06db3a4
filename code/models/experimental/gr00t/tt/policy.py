# SPDX-License-Identifier: Apache-2.0
"""Precision and execution policy of the TT-NN port, as one frozen object reported in /info.

``mixed_dit`` (the default): the DiT blocks' matmul weights in bfloat8_b, everything else bf16.
``bf16``: every weight in bf16. Overrides come from the environment (``GR00T_POLICY``,
``GR00T_TRACE_LAYOUT``); a bad value names the variable.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..common.errors import ConfigError

DTYPE_POLICIES = ("mixed_dit", "bf16")
TRACE_LAYOUTS = ("per_stage",)  # vision / llm / adapter / denoise traces
# The DiT blocks' matmul weights (fused attention projections, feed-forward, AdaLN modulation), not biases;
# names as the versions' ``device_tensors`` (``weight_layout_n15``, ``weight_layout_n17``) emit them.
_DIT_MATMUL = re.compile(r"^action_head\.model\.transformer_blocks\.\d+\."
                         r"(attn1\.(qkv|q|k|v|to_out\.0)|ff\.net\.(0\.proj|2)|norm1\.linear)\.weight$")


@dataclass(frozen=True)
class TTPolicy:
    dtype_policy: str = "mixed_dit"
    trace_layout: str = "per_stage"

    def __post_init__(self) -> None:
        if self.dtype_policy not in DTYPE_POLICIES:
            raise ConfigError(f"GR00T_POLICY={self.dtype_policy!r}: expected one of {list(DTYPE_POLICIES)}")
        if self.trace_layout not in TRACE_LAYOUTS:
            raise ConfigError(f"GR00T_TRACE_LAYOUT={self.trace_layout!r}: expected one of {list(TRACE_LAYOUTS)}")

    def weight_dtype(self, name: str) -> str:
        """ttnn dtype name for a checkpoint tensor: "bfloat8_b" or "bfloat16"."""
        if self.dtype_policy == "mixed_dit" and _DIT_MATMUL.match(name):
            return "bfloat8_b"
        return "bfloat16"

    def with_env_overrides(self, env: Mapping[str, str]) -> "TTPolicy":
        """This policy with ``GR00T_POLICY`` / ``GR00T_TRACE_LAYOUT`` from ``env`` applied (validated). The
        published N1.7 package's verify lines call it, so it stays part of this module's API."""
        return dataclasses.replace(self, dtype_policy=env.get("GR00T_POLICY", self.dtype_policy),
                                   trace_layout=env.get("GR00T_TRACE_LAYOUT", self.trace_layout))

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)
