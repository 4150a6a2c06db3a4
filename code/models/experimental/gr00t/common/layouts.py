# SPDX-License-Identifier: Apache-2.0
"""Served layouts as data: cameras, state/action groups, token limits, embodiment slot.

Everything version-specific that the pre/post-processing and the server need is a row here, so a new
embodiment is a new ``Layout``, not a new branch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .embodiments_n16 import EMBODIMENTS as N16_EMBODIMENTS
from .embodiments_n16 import N16Embodiment
from .errors import ConfigError
from .versions import SPECS


@dataclass(frozen=True)
class WireModality:
    """NVIDIA's modality config of a served embodiment, as its ``ModalityConfig`` entries carry it: what the GR00T
    PolicyServer (ZMQ) protocol and openpi's metadata speak (the server's ``wire/``)."""

    video_delta: tuple[int, ...]
    language_key: str
    image_hw: tuple[int, int] | None  # the frame size its cameras deliver (DROID letterboxes to 180×320); None: unknown
    action_reps: tuple[tuple[str, str, str, str | None], ...] = ()  # (key, rep, type, format) or empty


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
    state_encoding: str  # "sin_cos" (GR1: no statistics) or "q01_q99" (clip to [-1, 1])
    action_normalization: str  # "min_max" (N1.5 metadata) or "per_key" (N1.7 statistics, see action_reps)
    default_seed: int
    # N1.7: how each action group maps back to the robot: "absolute" (q01/q99 of the action statistics),
    # "relative_add" (per-step relative min/max, then added to the state) or "relative_eef9d" (per-step
    # relative min/max, then composed onto the state's pose in SE(3)).
    action_reps: tuple[tuple[str, str], ...] = ()
    aspect_range: tuple[float, float] | None = None  # allowed width / height of every frame
    wire: WireModality | None = None  # NVIDIA's modality config of this embodiment (the wire protocols)
    # The static (h, w) patch grid of every image a TT-NN build is for, where the checkpoint decides it (N1.6: its
    # processor config's image chain on the wire frame size, put here by ``tt/ttnn_policy_n16``); None in the rows.
    image_grids: tuple[tuple[int, int], ...] | None = None

    @property
    def ttnn_refusal(self) -> str | None:
        """Why the TT-NN port cannot serve this layout, or None: its models are built for static image grids, from the
        frame size the cameras deliver (``wire.image_hw``; N1.6's unitree_g1 has none known)."""
        if self.wire is None or self.wire.image_hw is None:
            return (f"layout {self.name!r} has no known frame size, and the TT-NN model is built for static image "
                    "grids; serve it with GR00T_BACKEND=torch")
        return None

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


# NVIDIA's N1.5 EMBODIMENT_TAG_MAPPING (``gr00t/data/embodiment_tags.py``, ``n1.5-release``): gr1 → 24.
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
    # ``fourier_gr1_arms_only`` in Isaac-GR00T n1.5-release ``gr00t/experiment/data_config.py`` (video ``ego_view``
    # at [0], 16 action steps); N1.5 predates the nested wire shape, which this maps it onto.
    wire=WireModality(video_delta=(0,), language_key="annotation.human.action.task_description",
                      image_hw=(256, 256)),
)

# DROID Franka (NVIDIA's N1.7 modality config ``oxe_droid_relative_eef_relative_joint`` in
# ``gr00t/configs/data/embodiment_configs.py``): two cameras × frames (t−15, t), relative EEF + relative joints.
DROID = Layout(
    name="droid",
    version="n17",
    embodiment="oxe_droid_relative_eef_relative_joint",
    embodiment_id=24,
    cameras=("exterior_image_1_left", "wrist_image_left"),
    frames_per_camera=2,
    state_groups=(("eef_9d", 9), ("gripper_position", 1), ("joint_position", 7)),
    action_groups=(("eef_9d", 9), ("gripper_position", 1), ("joint_position", 7)),
    max_text_tokens=51,
    state_encoding="q01_q99",
    action_normalization="per_key",
    default_seed=42,
    action_reps=(("eef_9d", "relative_eef9d"), ("gripper_position", "absolute"), ("joint_position", "relative_add")),
    aspect_range=(1.686, 1.814),  # 16:9 frames land on the 16 × 28 patch grid
    # ``oxe_droid_relative_eef_relative_joint`` in Isaac-GR00T ``gr00t/configs/data/embodiment_configs.py``
    wire=WireModality(video_delta=(-15, 0), language_key="annotation.language.language_instruction",
                      image_hw=(180, 320),
                      action_reps=(("eef_9d", "RELATIVE", "EEF", "XYZ_ROT6D"),
                                   ("gripper_position", "ABSOLUTE", "NON_EEF", "DEFAULT"),
                                   ("joint_position", "RELATIVE", "NON_EEF", "DEFAULT"))),
)



def _n16_layout(name: str, e: N16Embodiment, image_hw: tuple[int, int] | None) -> Layout:
    """An N1.6 tag's observation contract (spec ``gr00t_n16.md`` §3, §8) from its ``embodiments_n16`` entry: cameras,
    state and action groups in modality order, one frame per camera. What the model computes comes from the
    checkpoint's own files (``normalization_n16.N16Processing``); ``ReferencePolicyN16`` refuses a checkpoint whose
    tag disagrees with its row. ``state_encoding`` / ``action_normalization`` describe the released configs only;
    ``max_text_tokens`` (the formalised instruction's tokens) is ours, as N1.5 GR1's 102 (NVIDIA has no limit);
    ``default_seed`` 0 for the CPU-generator noise of ``flow_matching.seeded_noise`` (NVIDIA draws unseeded, §9).
    ``image_hw``: the frame size NVIDIA's data delivers, where the spec gives one (G1's is not known: None)."""
    reps = tuple((k, "relative_add" if k in e.relative else "absolute") for k, _ in e.action_groups)
    wire = WireModality(
        video_delta=(0,), language_key=e.language_key, image_hw=image_hw,
        action_reps=tuple((k, "RELATIVE" if k in e.relative else "ABSOLUTE", "NON_EEF", "DEFAULT")
                          for k, _ in e.action_groups) if e.lists_action_configs else ())
    return Layout(name=name, version="n16", embodiment=e.tag, embodiment_id=e.embodiment_id, cameras=e.cameras,
                  frames_per_camera=1, state_groups=e.state_groups, action_groups=e.action_groups, max_text_tokens=102,
                  state_encoding="sin_cos" if e.sin_cos_state else "min_max",
                  action_normalization="per_key" if e.mean_std_action else "min_max", default_seed=0,
                  action_reps=reps, wire=wire)


# GR00T N1.6, keyed by embodiment tag (``GR00T_EMBODIMENT``). GR1: five groups incl. waist, horizon 16, one 256×256
# ego-view camera; unitree_g1 and oxe_widowx from NVIDIA's templates (bridge frames 256², spec §8).
N16_LAYOUTS = {
    "gr1": _n16_layout("gr1_n16", N16_EMBODIMENTS["gr1"], (256, 256)),
    "unitree_g1": _n16_layout("unitree_g1", N16_EMBODIMENTS["unitree_g1"], None),
    "oxe_widowx": _n16_layout("oxe_widowx", N16_EMBODIMENTS["oxe_widowx"], (256, 256)),
}

LAYOUTS = {lay.name: lay for lay in (GR1, DROID, *N16_LAYOUTS.values())}
if set(LAYOUTS) != {name for spec in SPECS.values() for name in spec.layouts}:
    raise ImportError("common/layouts.py: the layouts and the registry's served rows disagree")
DEFAULT_LAYOUT = {v: s.layout for v, s in SPECS.items()}  # the layout each version serves


def get_layout(name: str) -> Layout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ConfigError(f"unknown layout {name!r}: known layouts are {sorted(LAYOUTS)}") from None
