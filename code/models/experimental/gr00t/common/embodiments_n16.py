# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6's embodiment tags as its checkpoint files describe them: the category rows of ``embodiment_id.json``
and, for the tags we write, the modality configs ``processor_config.json`` carries (spec ``gr00t_n16.md`` §1.3, §1.5,
§3, §8).

This is what the synthetic writer puts into the files; a served N1.6 checkpoint's own files are what count. Group
dimensions live in ``statistics.json`` in the real files; here they are part of the table. Sources: ``gr1`` from
NVIDIA's notebook outputs on the base checkpoint (five groups, sin/cos state, relative arms and hands, absolute
waist, horizon 16); ``unitree_g1`` and ``oxe_widowx`` from NVIDIA's templates in
``gr00t/configs/data/embodiment_configs.py`` (e29d8fc). The G1 group widths (legs 6, waist 3, arms 7, Dex3 hands 7,
base height 1, navigate 3) are those of NVIDIA's G1 pick-and-place dataset layout; the spec's table gives only keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# ``embodiment_id.json`` of nvidia/GR00T-N1.6-3B (spec §1.5): tag → category row of the embodiment MLPs. NVIDIA's
# processor adds ``oxe_droid`` 16 and ``new_embodiment`` 10 from code when a file lacks them.
EMBODIMENT_IDS = {"oxe_google": 0, "oxe_widowx": 1, "libero_panda": 2, "unitree_g1": 8, "robocasa_panda_omron": 13,
                  "gr1": 20, "behavior_r1_pro": 24}
CODE_EMBODIMENT_IDS = {"oxe_droid": 16, "new_embodiment": 10}


@dataclass(frozen=True)
class N16Embodiment:
    tag: str
    cameras: tuple[str, ...]
    state_groups: tuple[tuple[str, int], ...]  # modality order
    action_groups: tuple[tuple[str, int], ...]  # modality order = the slices of the 128-wide action vector
    horizon: int  # len(action delta_indices); the model always denoises 50 steps
    language_key: str
    relative: tuple[str, ...] = ()  # action keys with rep RELATIVE (NON_EEF, DEFAULT, the same-named state key)
    sin_cos_state: tuple[str, ...] = ()  # state keys encoded [sin, cos] (when the processor flag is on)
    mean_std_action: tuple[str, ...] = ()  # action keys normalised by mean/std instead of min/max
    lists_action_configs: bool = True  # NVIDIA's oxe_widowx template has none (every key absolute)

    @property
    def embodiment_id(self) -> int:
        return EMBODIMENT_IDS[self.tag]

    def modality_config(self) -> dict[str, Any]:
        """This tag's entry of ``processor_kwargs.modality_configs`` as ``Gr00tN1d6Processor.save_pretrained`` writes
        it: every ``ModalityConfig`` field, enums by name."""

        def modality(delta: list[int], keys, sin_cos=None, mean_std=None, actions=None) -> dict[str, Any]:
            return {"delta_indices": delta, "modality_keys": list(keys), "sin_cos_embedding_keys": sin_cos,
                    "mean_std_embedding_keys": mean_std, "action_configs": actions}

        actions = [{"rep": "RELATIVE" if key in self.relative else "ABSOLUTE", "type": "NON_EEF", "format": "DEFAULT",
                    "state_key": None} for key, _ in self.action_groups] if self.lists_action_configs else None
        return {
            "video": modality([0], self.cameras),
            "state": modality([0], [k for k, _ in self.state_groups], sin_cos=list(self.sin_cos_state) or None),
            "action": modality(list(range(self.horizon)), [k for k, _ in self.action_groups],
                               mean_std=list(self.mean_std_action) or None, actions=actions),
            "language": modality([0], [self.language_key]),
        }


_GR1_GROUPS = (("left_arm", 7), ("right_arm", 7), ("left_hand", 6), ("right_hand", 6), ("waist", 3))
_WIDOWX_POSE = ("x", "y", "z", "roll", "pitch", "yaw")

GR1 = N16Embodiment(
    tag="gr1", cameras=("ego_view_bg_crop_pad_res256_freq20",), state_groups=_GR1_GROUPS, action_groups=_GR1_GROUPS,
    horizon=16, language_key="task", relative=("left_arm", "right_arm", "left_hand", "right_hand"),
    sin_cos_state=tuple(k for k, _ in _GR1_GROUPS))
UNITREE_G1 = N16Embodiment(
    tag="unitree_g1", cameras=("ego_view",),
    state_groups=(("left_leg", 6), ("right_leg", 6), ("waist", 3), ("left_arm", 7), ("right_arm", 7),
                  ("left_hand", 7), ("right_hand", 7)),
    action_groups=(("left_arm", 7), ("right_arm", 7), ("left_hand", 7), ("right_hand", 7), ("waist", 3),
                   ("base_height_command", 1), ("navigate_command", 3)),
    horizon=30, language_key="annotation.human.task_description", relative=("left_arm", "right_arm"))
OXE_WIDOWX = N16Embodiment(
    tag="oxe_widowx", cameras=("image_0",), state_groups=tuple((k, 1) for k in (*_WIDOWX_POSE, "pad", "gripper")),
    action_groups=tuple((k, 1) for k in (*_WIDOWX_POSE, "gripper")), horizon=8,
    language_key="annotation.human.action.task_description", mean_std_action=_WIDOWX_POSE, lists_action_configs=False)

EMBODIMENTS = {e.tag: e for e in (GR1, UNITREE_G1, OXE_WIDOWX)}
