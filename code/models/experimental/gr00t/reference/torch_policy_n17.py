# SPDX-License-Identifier: Apache-2.0
"""fp32 reference policy for GR00T N1.7 / DROID, stage by stage (NVIDIA's ``Gr00tPolicy.get_action``, ``n1.7-release``).

Frames in time-major order (every camera at t−15, then every camera at t) → DROID eval chain → Qwen
smart resize and patches; formalised instruction → Qwen3-VL chat prompt; state q01/q99-normalised;
Qwen3-VL backbone (deepstack, raw layer output) → VL self-attention → 4 Euler steps of the
AlternateVLDiT → clip, un-normalise per key, compose relative actions onto the request's state.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..common.checkpoint import LazyCheckpoint
from ..common.configs_n17 import Gr00tN17Config
from ..common.layouts import get_layout
from ..common.inputs_n17 import droid_frames, finish_n17, frozen_prefix_n17, prepare_n17
from ..common.normalization_n17 import DroidStats
from ..common.observation import Observation
from ..common.policy import PreparedInputs
from ..common.synthetic import synthetic_info
from ..common.timing import Stopwatch
from .torch_gr00t_n17 import Gr00tN17
from .policy import ReferencePolicyBase


class ReferencePolicyN17(ReferencePolicyBase):
    """N1.7 DROID: the shared life cycle (``get_action`` = prepare → infer → finish) with N1.7's own
    checkpoint files, host chain, model and action decoding."""

    @classmethod
    def from_checkpoint(cls, directory: str | Path, layout: str = "droid", device: str = "cpu",
                        dtypes_of=None) -> "ReferencePolicyN17":
        """The policy on ``directory``'s checkpoint, fp32 (``dtypes_of``: parts loaded in another dtype, for a
        mixed-precision fast path that takes the model over: ``Gr00tModel.from_checkpoint``)."""
        directory = Path(directory)
        config = Gr00tN17Config.from_checkpoint(directory)
        lay = get_layout(layout)
        stats = DroidStats.from_checkpoint(directory, lay, config.action_head.action_horizon)
        model = Gr00tN17.from_checkpoint(LazyCheckpoint(directory), config, dtype=torch.float32,
                                         dtypes_of=dtypes_of).to(device)
        return cls(model, config, lay, stats, directory, synthetic_info(directory))

    # ---- host side (shared with the TT-NN policy: ``common/inputs_n17.py``) ----------------------
    def frames(self, obs: Observation) -> list[np.ndarray]:
        """Time-major, camera-minor: [ext(t−15), wrist(t−15), ext(t), wrist(t)]."""
        return droid_frames(obs, self.layout)

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        return prepare_n17(self.config, self.layout, self.stats, obs, noise=noise, seed=seed, state_dtype=state_dtype)

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return finish_n17(action_pred, inputs, self.stats, self.layout)

    def frozen_prefix(self, last_normalized, last_actions, steps: slice, inputs) -> np.ndarray:
        """N1.7's actions are relative to the request's state: ``inputs_n17.frozen_prefix_n17``."""
        return frozen_prefix_n17(last_normalized, last_actions, steps, inputs, self.stats, self.layout)

    # ---- the model -------------------------------------------------------------------------
    @torch.inference_mode()
    def infer(self, inputs: PreparedInputs, clock: Stopwatch | None = None) -> dict[str, torch.Tensor]:
        clock = clock or Stopwatch()
        head, dev = self.model.action_head, self.device
        cat_ids = self.cat_ids.expand(inputs.input_ids.shape[0])  # one embodiment per batch row (stacked requests)
        out = self.model.backbone(inputs.input_ids.to(dev), inputs.pixel_values.to(dev), inputs.image_grid_thw.to(dev),
                                  after_vision=lambda: clock.lap("vision", dev))
        clock.lap("llm", dev)
        vl_embs = head.condition(out["backbone_features"])
        state_features = head.state_encoder(inputs.state.to(dev), cat_ids)
        image_mask = out["image_mask"]
        key_masks = {"text": ~image_mask, "image": image_mask}  # no padding: stacked requests share one prompt length
        clock.lap("adapter", dev)
        taps = self.denoise(vl_embs, state_features, cat_ids, inputs, clock, key_masks)
        return {"pixel_values": inputs.pixel_values, "input_ids": inputs.input_ids, "state": inputs.state,
                "noise": inputs.noise, "vision_embeds": out["vision_embeds"],
                "backbone_features": out["backbone_features"], "vl_embs": vl_embs, "state_features": state_features,
                **taps}

