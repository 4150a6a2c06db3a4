# SPDX-License-Identifier: Apache-2.0
"""The N1.5 host input chain every N1.5 policy shares (reference, fast path, TT-NN): initial noise,
prompt ids, encoded state, pixel values."""

from __future__ import annotations

import torch

from .configs_n15 import Gr00tN15Config
from .layouts import Layout
from .normalization_n15 import encode_state
from .observation import Observation
from .policy import PreparedInputs, initial_noise
from .preprocessing_n15 import n15_pixel_values
from .prompts import encode_n15_prompt


def prepare_n15(config: Gr00tN15Config, layout: Layout, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
    """Validate and encode one N1.5 observation; raises ``InputError`` before any model work."""
    e, h = config.backbone, config.action_head
    x0, source, seed = initial_noise(noise, seed, layout.default_seed, h.action_horizon, h.action_dim)
    prompt = encode_n15_prompt(obs.instruction, n_images=layout.n_images, tokens_per_image=e.tokens_per_image,
                               max_text_tokens=layout.max_text_tokens)
    state = encode_state(obs.state, layout, h.max_state_dim, dtype=state_dtype)  # [1, 1, 64]
    frames = [f for cam in layout.cameras for f in obs.images[cam]]
    pixel_values = torch.stack([n15_pixel_values(f, e.vision.image_size) for f in frames])
    return PreparedInputs(pixel_values, torch.tensor([prompt.input_ids], dtype=torch.int64), state, x0,
                          prompt.text_tokens, source, seed)
