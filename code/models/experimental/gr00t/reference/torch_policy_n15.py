# SPDX-License-Identifier: Apache-2.0
"""fp32 reference policy: NVIDIA's ``Gr00tPolicy.get_action`` for N1.5 GR1, stage by stage.

observation → pixel values, prompt ids, encoded state → backbone → VL conditioning → 4 Euler steps of
the DiT → un-normalised actions per group. Every stage boundary is kept as a named tap so other
backends can be compared against it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..common.checkpoint import LazyCheckpoint
from ..common.configs_n15 import Gr00tN15Config
from ..common.inputs_n15 import prepare_n15
from ..common.layouts import get_layout
from ..common.normalization_n15 import ActionStats, unnormalize
from ..common.observation import Observation
from ..common.policy import PreparedInputs
from ..common.synthetic import synthetic_info
from ..common.timing import Stopwatch
from .policy import ReferencePolicyBase
from .torch_gr00t_n15 import Gr00tN15


class ReferencePolicy(ReferencePolicyBase):
    """N1.5 GR1: ``model`` is a ``Gr00tN15``, ``stats`` the GR1 ``ActionStats``."""

    @classmethod
    def from_checkpoint(cls, directory: str | Path, layout: str = "gr1", device: str = "cpu",
                        dtypes_of=None) -> "ReferencePolicy":
        """The policy on ``directory``'s checkpoint, fp32 (``dtypes_of``: parts loaded in another dtype, for a
        mixed-precision fast path that takes the model over: ``Gr00tModel.from_checkpoint``)."""
        directory = Path(directory)
        config = Gr00tN15Config.from_checkpoint(directory)
        lay = get_layout(layout)
        stats = ActionStats.from_metadata(directory, lay)  # fail on bad metadata before loading weights
        model = Gr00tN15.from_checkpoint(LazyCheckpoint(directory), config, dtype=torch.float32,
                                         dtypes_of=dtypes_of).to(device)
        return cls(model, config, lay, stats, directory, synthetic_info(directory))

    # ---- host side -------------------------------------------------------------------------
    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        """Validate and encode one observation (pixels, prompt ids, state, initial noise). Raises
        ``InputError`` before any model work."""
        return prepare_n15(self.config, self.layout, obs, noise=noise, seed=seed, state_dtype=state_dtype)

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Model-space chunk [1, H, D] → (float32 [H, D], un-normalised actions per group)."""
        chunk = action_pred[0].float().cpu().numpy()
        return chunk, unnormalize(chunk, self.stats, self.layout)

    # ---- the model -------------------------------------------------------------------------
    @torch.inference_mode()
    def infer(self, inputs: PreparedInputs, clock: Stopwatch | None = None) -> dict[str, torch.Tensor]:
        """Vision → LLM → adapter → Euler loop; returns every stage boundary as a named tap. Takes B stacked
        requests (``stack_inputs``) as well as one."""
        clock = clock or Stopwatch()
        eagle, head = self.model.backbone.eagle_model, self.model.action_head
        pixel_values, input_ids = inputs.pixel_values.to(self.device), inputs.input_ids.to(self.device)
        cat_ids = self.cat_ids.expand(input_ids.shape[0])  # one embodiment per batch row (stacked requests)
        vision = eagle.vision_features(pixel_values)
        vit_embeds = eagle.mlp1(vision)
        clock.lap("vision", self.device)
        backbone_features = eagle.language_model.model(eagle.splice(input_ids, vit_embeds))
        clock.lap("llm", self.device)
        vl_embs = head.condition(backbone_features)
        state_features = head.state_encoder(inputs.state.to(self.device), cat_ids)
        clock.lap("adapter", self.device)
        taps = self.denoise(vl_embs, state_features, cat_ids, inputs, clock)
        return {"pixel_values": inputs.pixel_values, "input_ids": inputs.input_ids, "state": inputs.state,
                "noise": inputs.noise, "vision_features": vision, "vit_embeds": vit_embeds,
                "backbone_features": backbone_features, "vl_embs": vl_embs, "state_features": state_features, **taps}
