# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.5 GR1 on TT-NN as a ``Policy``: the reference's host chain (``common/inputs_n15``: ``prepare_n15``,
the min/max un-normalisation) around ``ttnn_gr00t_n15.TtGr00tN15``; what every version shares is in
``ttnn_policy.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..common.configs_n15 import Gr00tN15Config
from ..common.inputs_n15 import prepare_n15
from ..common.layouts import Layout
from ..common.normalization_n15 import ActionStats, unnormalize
from ..common.observation import Observation
from ..common.policy import PreparedInputs
from ..common.prompts import encode_n15_prompt
from .ttnn_policy import TTGr00tPolicyBase


@dataclass
class TTGr00tPolicy(TTGr00tPolicyBase):
    """GR00T N1.5 GR1 on TT-NN: the reference's host chain around the device model; one command queue by default,
    as the published N1.5 package runs (``VersionSpec.tt_num_cqs``)."""

    config: Gr00tN15Config
    stats: ActionStats
    model: object  # TtGr00tN15

    config_cls = Gr00tN15Config

    @staticmethod
    def load_stats(checkpoint_dir: Path, layout: Layout, config) -> ActionStats:
        return ActionStats.from_metadata(checkpoint_dir, layout)

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        """The reference's input chain; raises ``InputError`` before any device work."""
        return prepare_n15(self.config, self.layout, obs, noise=noise, seed=seed, state_dtype=state_dtype)

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Model-space chunk [1, H, D] → (float32 [H, D], un-normalised actions per group); N1.5 needs no
        request state to un-normalise."""
        chunk = action_pred[0].float().cpu().numpy()
        return chunk, unnormalize(chunk, self.stats, self.layout)


def build_model(weights, config: Gr00tN15Config, layout: Layout, batch: int = 1):
    """``TtGr00tN15`` over device weights, built for the layout's static geometry and ``batch`` requests per call
    (``VersionSpec.tt_model_builder``)."""
    from .ttnn_gr00t_n15 import StaticShapes, TtGr00tN15

    return TtGr00tN15(weights, config, StaticShapes.gr1(config, image_offset(config, layout), batch=batch))


def image_offset(config: Gr00tN15Config, layout: Layout) -> int:
    """Where the image block starts in every prompt of this layout (the chat prefix is fixed)."""
    ids = encode_n15_prompt("x", n_images=layout.n_images, tokens_per_image=config.backbone.tokens_per_image,
                            max_text_tokens=layout.max_text_tokens).input_ids
    return ids.index(config.backbone.image_token_index)


def blank_host_inputs(model, config: Gr00tN15Config, layout: Layout, instruction: str) -> dict:
    """A request's host tensors at the model's static shapes: zero pixels, state and noise, a real prompt
    (``VersionSpec.tt_blank_inputs``; the stage sheet's request, ``tt/tools/stage_sheet.py``)."""
    h = config.action_head
    state, noise = torch.zeros(1, 1, h.max_state_dim), torch.zeros(1, h.action_horizon, h.action_dim)
    ids = encode_n15_prompt(instruction, n_images=layout.n_images, tokens_per_image=config.backbone.tokens_per_image,
                            max_text_tokens=layout.max_text_tokens).input_ids
    size = config.backbone.vision.image_size
    return model.host_inputs(torch.zeros(1, 3, size, size), torch.tensor([ids]), state, noise)
