# SPDX-License-Identifier: Apache-2.0
"""What the fp32 reference policies of every version share: the loaded model with its config, layout and
statistics, and ``get_action`` (prepare → infer → finish, ``common/policy.py``). Each version's class
(``torch_policy_n15.py`` for N1.5, ``torch_policy_n17.py``) adds its checkpoint loading, host chain and
model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..common.layouts import Layout
from ..common.policy import PolicyResult, get_action
from ..common.rtc import absolute_prefix


class ReferencePolicyBase:
    def __init__(self, model: torch.nn.Module, config, layout: Layout, stats, checkpoint_dir: Path,
                 synthetic: dict | None):
        self.model, self.config, self.layout, self.stats = model, config, layout, stats
        self.checkpoint_dir, self.synthetic = checkpoint_dir, synthetic
        self.device = next(model.parameters()).device
        self.cat_ids = torch.tensor([layout.embodiment_id], dtype=torch.int64, device=self.device)

    @property
    def chunk_shape(self) -> tuple[int, int]:
        """(rows, width) of the served model-space chunk (``PolicyResult.action_pred``): the action head's horizon and
        action dim. N1.6 overrides the rows: its noise covers a 50-step envelope, the tag's horizon is returned."""
        h = self.config.action_head
        return h.action_horizon, h.action_dim

    def checkpoint_modality_config(self) -> dict | None:
        """The served tag's modality config as the checkpoint stores it (N1.6: ``processor_config.json``), or None
        where the wire protocols build it from the layout row (N1.5 has none; N1.7's is the layout's)."""
        return None

    def denoise(self, vl_embs: torch.Tensor, state_features: torch.Tensor, cat_ids: torch.Tensor, inputs,
                clock, key_masks=None) -> dict[str, torch.Tensor]:
        """The action head's Euler loop from the request's noise (RTC's prefix or guide when it has one), each step a
        lap of ``clock`` and a tap: ``{"velocity_<i>": …, "action_pred": …}``."""
        velocities: list[torch.Tensor] = []

        def on_step(i: int, v: torch.Tensor) -> None:
            velocities.append(v)
            clock.lap(f"dit_step_{i}", self.device)

        action_pred = self.model.action_head.sample(vl_embs, state_features, cat_ids, inputs.noise.to(self.device),
                                                    on_step, key_masks, inpaint=inputs.inpaint, guide=inputs.guide)
        return {**{f"velocity_{i}": v for i, v in enumerate(velocities)}, "action_pred": action_pred}

    def frozen_prefix(self, last_normalized: np.ndarray, last_actions: dict[str, np.ndarray], steps: slice,
                      inputs) -> np.ndarray:
        """RTC's inpainting target [d, action_dim] in model space for a new request (``inputs``): the previous
        chunk's ``steps``. Absolute actions (N1.5 GR1) take the previous model-space rows as they are; a version
        whose actions are relative to the state re-expresses the previous absolute actions (N1.7 overrides)."""
        return absolute_prefix(last_normalized, steps)

    def get_action(self, obs, *, noise=None, seed: int | None = None, state_dtype: str = "float64") -> PolicyResult:
        return get_action(self, obs, noise=noise, seed=seed, state_dtype=state_dtype)
