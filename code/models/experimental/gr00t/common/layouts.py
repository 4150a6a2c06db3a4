# SPDX-License-Identifier: Apache-2.0
"""Served layouts as data: cameras, state/action groups, token limits, embodiment slot.

Everything version-specific that the pre/post-processing and the server need is a row here, so a new
embodiment is a new ``Layout``, not a new branch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError


@dataclass(frozen=True)
class Layout:
    name: str
    version: str
    embodiment: str
    embodiment_id: int  # row of the category-specific encoder/decoder weights
    cameras: tuple[str, ...]
    frames_per_camera: int
    state_groups: tuple[tuple[str, int], ...]  # request order == model order
    action_groups: tuple[tuple[str, int], ...]  # slices of the normalised action vector, in order
    max_text_tokens: int  # instruction tokens (as rendered into the prompt); longer is refused
    state_encoding: str  # "sin_cos" (GR1 arms-only: no statistics)
    action_normalization: str  # "min_max" (statistics.action.<group>.{min,max})
    default_seed: int

    @property
    def n_images(self) -> int:
        return len(self.cameras) * self.frames_per_camera

    @property
    def state_dims(self) -> dict[str, int]:
        return dict(self.state_groups)

    @property
    def action_dims(self) -> dict[str, int]:
        return dict(self.action_groups)

    @property
    def action_keys(self) -> list[str]:
        return [name for name, _ in self.action_groups]


# NVIDIA's EMBODIMENT_TAG_MAPPING (spec §3.5): gr1 → 24.
GR1 = Layout(
    name="gr1",
    version="n15",
    embodiment="gr1",
    embodiment_id=24,
    cameras=("ego_view",),
    frames_per_camera=1,
    state_groups=(("left_arm", 7), ("right_arm", 7), ("left_hand", 6), ("right_hand", 6)),
    action_groups=(("left_arm", 7), ("right_arm", 7), ("left_hand", 6), ("right_hand", 6)),
    max_text_tokens=102,
    state_encoding="sin_cos",
    action_normalization="min_max",
    default_seed=0,
)

LAYOUTS = {GR1.name: GR1}
DEFAULT_LAYOUT = {"n15": "gr1"}


def get_layout(name: str) -> Layout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ConfigError(f"unknown layout {name!r}: known layouts are {sorted(LAYOUTS)}") from None
