# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.7 DROID on TT-NN as a ``Policy``: the reference's host chain (``common/inputs_n17``: ``prepare_n17`` /
``finish_n17``, the DROID chain and the relative actions composed onto the request's state) around
``ttnn_gr00t_n17.TtGr00tN17``; what every version shares is in ``ttnn_policy.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..common.configs_n17 import Gr00tN17Config
from ..common.inputs_n17 import finish_n17, frozen_prefix_n17, prepare_n17
from ..common.layouts import Layout
from ..common.normalization_n17 import DroidStats
from ..common.observation import Observation
from ..common.policy import PreparedInputs
from ..common.prompts import encode_n17_prompt
from .ttnn_policy import TTGr00tPolicyBase


@dataclass
class TTGr00tPolicyN17(TTGr00tPolicyBase):
    """GR00T N1.7 DROID on TT-NN: the reference's host chain (``common/inputs_n17``: ``prepare``, ``finish``)
    around the device model built for the static DROID geometry; two command queues by default, as published
    (``VersionSpec.tt_num_cqs``)."""

    config: Gr00tN17Config
    stats: DroidStats
    model: object  # TtGr00tN17

    config_cls = Gr00tN17Config

    @staticmethod
    def load_stats(checkpoint_dir: Path, layout: Layout, config) -> DroidStats:
        return DroidStats.from_checkpoint(checkpoint_dir, layout, config.action_head.action_horizon)

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        """The reference's DROID chain (``common/inputs_n17``); raises ``InputError`` before any device work."""
        return prepare_n17(self.config, self.layout, self.stats, obs, noise=noise, seed=seed, state_dtype=state_dtype)

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Model-space chunk → absolute DROID actions composed onto the request's state."""
        return finish_n17(action_pred, inputs, self.stats, self.layout)

    def frozen_prefix(self, last_normalized, last_actions, steps: slice, inputs: PreparedInputs) -> np.ndarray:
        """N1.7's actions are relative to the request's state: ``inputs_n17.frozen_prefix_n17``."""
        return frozen_prefix_n17(last_normalized, last_actions, steps, inputs, self.stats, self.layout)


def build_model(weights, config: Gr00tN17Config, layout: Layout, batch: int = 1):
    """``TtGr00tN17`` over device weights, built for the layout's static image grids
    and ``batch`` requests per call (``VersionSpec.tt_model_builder``)."""
    from .ttnn_gr00t_n17 import StaticShapesN17, TtGr00tN17
    from .weight_layout_n17 import static_grids

    grids = static_grids(config, layout)
    return TtGr00tN17(weights, config, StaticShapesN17.droid(config, grids, image_rows_n17(config, layout, grids),
                                                             batch=batch))


def image_rows_n17(config: Gr00tN17Config, layout: Layout, grids: list[list[int]]) -> list[int]:
    """The prompt rows of the image tokens: the chat template puts every image before the instruction, so
    they are the same for every prompt of the layout."""
    merge = config.backbone.vision.spatial_merge_size**2
    ids = encode_n17_prompt("x", tokens_per_image=[t * h * w // merge for t, h, w in grids],
                            max_text_tokens=layout.max_text_tokens).input_ids
    return [i for i, t in enumerate(ids) if t == config.backbone.image_token_id]


def blank_host_inputs(model, config: Gr00tN17Config, layout: Layout, instruction: str) -> dict:
    """A request's host tensors at the model's static shapes: zero patches, state and noise, a real prompt
    (``VersionSpec.tt_blank_inputs``; the stage sheet's request, ``tt/tools/stage_sheet.py``)."""
    s, h = model.shapes, config.action_head
    state, noise = torch.zeros(1, 1, h.max_state_dim), torch.zeros(1, h.action_horizon, h.action_dim)
    merge = config.backbone.vision.spatial_merge_size**2
    ids = encode_n17_prompt(instruction, tokens_per_image=[t * hh * w // merge for t, hh, w in s.grids],
                            max_text_tokens=layout.max_text_tokens).input_ids
    return model.host_inputs(torch.zeros(s.patches, s.patch_dim), torch.tensor([ids]), torch.tensor(s.grids),
                             state, noise)
