# SPDX-License-Identifier: Apache-2.0
"""GR00T N1.6 on TT-NN as a ``Policy``: the reference's host chain (``common/inputs_n16.N16Host``: the tag's image
chain, prompt, state encoding, ``decode_actions`` with the tag's horizon, RTC's re-expressed prefix) around
``ttnn_gr00t_n16.TtGr00tN16``; what every version shares is in ``ttnn_policy.py``.

The layout the weights are converted and the model is built for (``served_layout``) is the tag's row as the
checkpoint's files make it: their category id (``inputs_n16.check_layout``) and the static image grids of their own
image chain (``processor_config.json``'s shortest edge and crop fraction on the row's wire frame size:
``N16Host.frame_grids``), carried in ``Layout.image_grids`` to ``weight_layout_n16.static_grids`` (the resized
position rows of the weight conversion, keyed into the weight cache) and to ``StaticShapesN16``. A tag without a
known frame size (unitree_g1) is refused with ``ConfigError`` when the model is built."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..common.configs_n16 import Gr00tN16Config
from ..common.inputs_n16 import N16Host
from ..common.layouts import Layout
from ..common.observation import Observation
from ..common.policy import PreparedInputs
from ..common.prompts_n16 import n16_prompt_ids
from .ttnn_policy import TTGr00tPolicyBase


@dataclass
class TTGr00tPolicyN16(TTGr00tPolicyBase):
    """GR00T N1.6 (any served tag with a known frame size) on TT-NN: the reference's host chain around the device
    model built for the checkpoint's static image grids. ``stats`` is the tag's ``N16Host`` (its statistics come
    with its processing and processor flags, read from the checkpoint's files together); one command queue by
    default (``VersionSpec.tt_num_cqs``)."""

    config: Gr00tN16Config
    stats: N16Host
    model: object  # TtGr00tN16

    config_cls = Gr00tN16Config

    @staticmethod
    def load_stats(checkpoint_dir: Path, layout: Layout, config) -> N16Host:
        return N16Host.from_checkpoint(checkpoint_dir, layout, config)

    @staticmethod
    def served_layout(layout: Layout, stats: N16Host) -> Layout:
        """The tag's row with the file's category id and the image grids of the checkpoint's image chain."""
        return dataclasses.replace(stats.layout, image_grids=stats.frame_grids())

    @property
    def processing(self):
        return self.stats.processing

    @property
    def processor(self):
        return self.stats.processor

    @property
    def chunk_shape(self) -> tuple[int, int]:
        """The tag's horizon × 128, as the reference's (``N16Host.chunk_shape``)."""
        return self.stats.chunk_shape

    def checkpoint_modality_config(self) -> dict:
        """The tag's entry of ``processor_config.json``, as the reference's (``N16Host.modality_config``)."""
        return self.stats.modality_config()

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        """The reference's N1.6 chain (``N16Host.prepare``); raises ``InputError`` before any device work (a frame
        off the static grid is refused by the model's ``host_inputs_for``, also before any device write)."""
        return self.stats.prepare(obs, noise=noise, seed=seed, state_dtype=state_dtype)

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Model chunk [1, 50, 128] → (float32 [H, 128], absolute actions per group) (``N16Host.finish``)."""
        return self.stats.finish(action_pred, inputs)

    def frozen_prefix(self, last_normalized, last_actions, steps: slice, inputs: PreparedInputs) -> np.ndarray:
        """N1.6's relative keys are re-expressed against the new state (``N16Host.frozen_prefix``)."""
        return self.stats.frozen_prefix(last_normalized, last_actions, steps, inputs)


def build_model(weights, config: Gr00tN16Config, layout: Layout, batch: int = 1):
    """``TtGr00tN16`` over device weights, built for the layout's static image grids (``Layout.image_grids`` when
    the policy set them) and ``batch`` requests per call (``VersionSpec.tt_model_builder``; only 1 so far)."""
    from .ttnn_gr00t_n16 import build_model as build

    return build(weights, config, layout, batch)


def blank_host_inputs(model, config: Gr00tN16Config, layout: Layout, instruction: str) -> dict:
    """A request's host tensors at the model's static shapes: zero images, state and noise, a real prompt
    (``VersionSpec.tt_blank_inputs``; the stage sheet's request, ``tt/tools/stage_sheet.py``). The instruction is
    formalised as the released processor configs say (``formalize_language``)."""
    s, h, b = model.shapes, config.action_head, config.backbone
    state, noise = torch.zeros(1, 1, h.max_state_dim), torch.zeros(1, h.action_horizon, h.action_dim)
    p, f = b.vision.patch_size, s.factor
    ids = n16_prompt_ids(instruction, [hh * w // f**2 for hh, w in s.grids], formalize=True,
                         max_text_tokens=layout.max_text_tokens).input_ids
    images = [torch.zeros(3, hh * p, w * p) for hh, w in s.grids]
    return model.host_inputs(images, torch.tensor([ids]), state, noise)
