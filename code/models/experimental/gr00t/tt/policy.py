# SPDX-License-Identifier: Apache-2.0
"""Precision and execution policy of the TT-NN port, as one frozen object reported in /info.

``mixed_dit`` (the default): the DiT blocks' matmul weights in bfloat8_b, everything else bf16.
``bf16``: every weight in bf16. ``vit_fork`` (``GR00T_VIT_FORK``, the published N1.7 package's switch: "1" the
tuned vision tower, "0" the verbatim one): the vision towers' block matmuls at the per-block math fidelity of
``VIT_FORK_FIDELITY`` (fp32 accumulation throughout), or HiFi4 everywhere when off. The tables were chosen from the
host accuracy estimate (``code/scripts/bench/estimate_tt_accuracy.py --fidelity``, README "TT-NN port"): the
cheapest assignment whose estimated chunk PCC and action-group PCCs keep a clear margin to the boot gate. Overrides
come from the environment (``GR00T_POLICY``, ``GR00T_TRACE_LAYOUT``, ``GR00T_VIT_FORK``); a bad value names the
variable.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..common.errors import ConfigError

DTYPE_POLICIES = ("mixed_dit", "bf16")
TRACE_LAYOUTS = ("per_stage",)  # vision / llm / adapter / denoise traces
MATH_FIDELITIES = ("LoFi", "HiFi2", "HiFi3", "HiFi4")  # multiplier passes 1..4 (``tools/golden_ops.py``)
VERBATIM_FIDELITY = "HiFi4"
# tower → per-block fidelity (``fidelity_of``'s spec: "F:a-b" ranges of blocks, then the fidelity of the rest).
# Only the towers' block matmuls (qkv, attention out, fc1, fc2) follow it; patch embedding, mergers and SDPA stay HiFi4.
VIT_FORK_FIDELITY = {"siglip": "HiFi3:0-5,HiFi2", "qwen3vl": "HiFi3:0-5,HiFi2"}
# The DiT blocks' matmul weights (fused attention projections, feed-forward, AdaLN modulation), not biases;
# names as the versions' ``device_tensors`` (``weight_layout_n15``, ``weight_layout_n17``) emit them.
_DIT_MATMUL = re.compile(r"^action_head\.model\.transformer_blocks\.\d+\."
                         r"(attn1\.(qkv|q|k|v|to_out\.0)|ff\.net\.(0\.proj|2)|norm1\.linear)\.weight$")


@dataclass(frozen=True)
class TTPolicy:
    dtype_policy: str = "mixed_dit"
    trace_layout: str = "per_stage"
    vit_fork: bool = True

    def __post_init__(self) -> None:
        if self.dtype_policy not in DTYPE_POLICIES:
            raise ConfigError(f"GR00T_POLICY={self.dtype_policy!r}: expected one of {list(DTYPE_POLICIES)}")
        if self.trace_layout not in TRACE_LAYOUTS:
            raise ConfigError(f"GR00T_TRACE_LAYOUT={self.trace_layout!r}: expected one of {list(TRACE_LAYOUTS)}")
        if not isinstance(self.vit_fork, bool):
            raise ConfigError(f"GR00T_VIT_FORK={self.vit_fork!r}: expected a bool")

    def vision_fidelity(self) -> dict[str, str]:
        """tower → per-block fidelity spec (``fidelity_of``): the tuned tables, or HiFi4 throughout."""
        return dict(VIT_FORK_FIDELITY) if self.vit_fork else {t: VERBATIM_FIDELITY for t in VIT_FORK_FIDELITY}

    def weight_dtype(self, name: str) -> str:
        """ttnn dtype name for a checkpoint tensor: "bfloat8_b" or "bfloat16"."""
        if self.dtype_policy == "mixed_dit" and _DIT_MATMUL.match(name):
            return "bfloat8_b"
        return "bfloat16"

    def with_env_overrides(self, env: Mapping[str, str]) -> "TTPolicy":
        """This policy with ``GR00T_POLICY`` / ``GR00T_TRACE_LAYOUT`` / ``GR00T_VIT_FORK`` ("1" or "0") from
        ``env`` applied (validated). The published N1.7 package's verify lines call it, so it stays part of this
        module's API."""
        fork = env.get("GR00T_VIT_FORK", "1" if self.vit_fork else "0")
        if fork not in ("0", "1"):
            raise ConfigError(f"GR00T_VIT_FORK={fork!r}: expected '1' (tuned vision fidelity) or '0' (verbatim, HiFi4)")
        return dataclasses.replace(self, dtype_policy=env.get("GR00T_POLICY", self.dtype_policy),
                                   trace_layout=env.get("GR00T_TRACE_LAYOUT", self.trace_layout), vit_fork=fork == "1")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def fidelity_of(spec: str, block: int) -> str:
    """A block's math fidelity under ``spec``: comma-separated "F:a-b" (blocks a..b, inclusive) or "F:a" items, then
    a bare "F" for every other block, e.g. "HiFi3:0-5,HiFi2"; "HiFi4" alone is the verbatim tower."""
    default = None
    for item in spec.split(","):
        name, _, blocks = item.strip().partition(":")
        if name not in MATH_FIDELITIES:
            raise ConfigError(f"fidelity spec {spec!r}: {name!r} is not one of {list(MATH_FIDELITIES)}")
        if not blocks:
            default = name
            continue
        lo, _, hi = blocks.partition("-")
        if int(lo) <= block <= int(hi or lo):
            return name
    if default is None:
        raise ConfigError(f"fidelity spec {spec!r}: no fidelity for block {block} (end it with a bare fidelity)")
    return default
