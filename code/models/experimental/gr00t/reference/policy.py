# SPDX-License-Identifier: Apache-2.0
"""What the fp32 reference policies of every version share: the loaded model with its config, layout and
statistics, and ``get_action`` (prepare → infer → finish, ``common/policy.py``). Each version's class
(``torch_policy_n15.py`` for N1.5, ``torch_policy_n17.py``) adds its checkpoint loading, host chain and
model."""

from __future__ import annotations

from pathlib import Path

import torch

from ..common.layouts import Layout
from ..common.policy import PolicyResult, get_action


class ReferencePolicyBase:
    def __init__(self, model: torch.nn.Module, config, layout: Layout, stats, checkpoint_dir: Path,
                 synthetic: dict | None):
        self.model, self.config, self.layout, self.stats = model, config, layout, stats
        self.checkpoint_dir, self.synthetic = checkpoint_dir, synthetic
        self.device = next(model.parameters()).device
        self.cat_ids = torch.tensor([layout.embodiment_id], dtype=torch.int64, device=self.device)

    def get_action(self, obs, *, noise=None, seed: int | None = None, state_dtype: str = "float64") -> PolicyResult:
        return get_action(self, obs, noise=noise, seed=seed, state_dtype=state_dtype)
