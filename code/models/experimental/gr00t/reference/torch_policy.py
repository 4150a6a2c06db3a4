# SPDX-License-Identifier: Apache-2.0
"""fp32 reference policy: NVIDIA's ``Gr00tPolicy.get_action`` for N1.5 GR1, stage by stage.

observation → pixel values, prompt ids, encoded state → backbone → VL conditioning → 4 Euler steps of
the DiT → un-normalised actions per group. Every stage boundary is kept as a named tap so other
backends can be compared against it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..common.checkpoint import LazyCheckpoint
from ..common.configs import Gr00tN15Config
from ..common.errors import InputError
from ..common.flow_matching import explicit_noise, seeded_noise
from ..common.layouts import Layout, get_layout
from ..common.normalization import ActionStats, encode_state, unnormalize
from ..common.observation import Observation
from ..common.preprocessing import n15_pixel_values
from ..common.prompts import encode_n15_prompt
from ..common.synthetic import synthetic_info
from .torch_gr00t import Gr00tN15


@dataclass
class PreparedInputs:
    """Everything the model needs for one request, built and validated on the host."""

    pixel_values: torch.Tensor  # [N_img, 3, 224, 224] float32
    input_ids: torch.Tensor  # [1, S] int64
    state: torch.Tensor  # [1, 1, max_state_dim] float32
    noise: torch.Tensor  # [1, horizon, action_dim] float32
    prompt_tokens: int
    noise_source: str  # "seed" or "client"
    seed: int | None
    raw_state: dict[str, np.ndarray] = field(default_factory=dict)  # N1.7 composes relative actions onto it
    image_grid_thw: torch.Tensor | None = None  # N1.7: [N_img, 3] patch grid per image


@dataclass
class PolicyResult:
    actions: dict[str, np.ndarray]  # group → float32 [horizon, dim], physical units
    action_pred: np.ndarray  # float32 [horizon, action_dim], normalised model space
    noise_source: str
    seed: int | None
    seq_len: int
    prompt_tokens: int
    timing_ms: dict[str, float]
    taps: dict[str, torch.Tensor] = field(default_factory=dict)


def initial_noise(noise, seed: int | None, default_seed: int, horizon: int, action_dim: int):
    """(noise [1, H, D], "client" | "seed", the seed used or None): explicit noise wins, else a seed."""
    if noise is not None and seed is not None:
        raise InputError("noise", "give either noise or seed, not both")
    if noise is not None:
        return explicit_noise(noise, horizon, action_dim), "client", None
    seed = default_seed if seed is None else seed
    return seeded_noise(seed, horizon, action_dim), "seed", seed


def prepare_n15(config: Gr00tN15Config, layout: Layout, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
    """The N1.5 host chain every backend shares: initial noise, prompt ids, encoded state, pixel values."""
    e, h = config.eagle, config.action_head
    x0, source, seed = initial_noise(noise, seed, layout.default_seed, h.action_horizon, h.action_dim)
    prompt = encode_n15_prompt(obs.instruction, n_images=layout.n_images, tokens_per_image=e.tokens_per_image,
                               max_text_tokens=layout.max_text_tokens)
    state = encode_state(obs.state, layout, h.max_state_dim, dtype=state_dtype)  # [1, 1, 64]
    frames = [f for cam in layout.cameras for f in obs.images[cam]]
    pixel_values = torch.stack([n15_pixel_values(f, e.vision.image_size) for f in frames])
    return PreparedInputs(pixel_values, torch.tensor([prompt.input_ids], dtype=torch.int64), state, x0,
                          prompt.text_tokens, source, seed)


class Stopwatch:
    """Accumulates named laps in milliseconds."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str, device: torch.device | None = None) -> None:
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize(device)  # kernels are asynchronous: time them, not their launch
        now = time.perf_counter()
        self.ms[name] = self.ms.get(name, 0.0) + (now - self._t) * 1e3
        self._t = now

    def add(self, name: str, ms: float) -> None:
        """Record a lap measured elsewhere (CUDA events around a graph replay) and restart the clock."""
        self.ms[name] = self.ms.get(name, 0.0) + ms
        self._t = time.perf_counter()


class ReferencePolicy:
    def __init__(self, model: Gr00tN15, config: Gr00tN15Config, layout: Layout, stats: ActionStats,
                 checkpoint_dir: Path, synthetic: dict | None):
        self.model, self.config, self.layout, self.stats = model, config, layout, stats
        self.checkpoint_dir, self.synthetic = checkpoint_dir, synthetic
        self.device = next(model.parameters()).device
        self.cat_ids = torch.tensor([layout.embodiment_id], dtype=torch.int64, device=self.device)

    @classmethod
    def from_checkpoint(cls, directory: str | Path, layout: str = "gr1", device: str = "cpu") -> "ReferencePolicy":
        directory = Path(directory)
        config = Gr00tN15Config.from_checkpoint(directory)
        lay = get_layout(layout)
        stats = ActionStats.from_metadata(directory, lay)  # fail on bad metadata before loading weights
        model = Gr00tN15.from_checkpoint(LazyCheckpoint(directory), config, dtype=torch.float32).to(device)
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
        """Vision → LLM → adapter → Euler loop; returns every stage boundary as a named tap."""
        clock = clock or Stopwatch()
        eagle, head = self.model.backbone.eagle_model, self.model.action_head
        pixel_values, input_ids = inputs.pixel_values.to(self.device), inputs.input_ids.to(self.device)
        vision = eagle.vision_features(pixel_values)
        vit_embeds = eagle.mlp1(vision)
        clock.lap("vision", self.device)
        backbone_features = eagle.language_model.model(eagle.splice(input_ids, vit_embeds))
        clock.lap("llm", self.device)
        vl_embs = head.condition(backbone_features)
        state_features = head.state_encoder(inputs.state.to(self.device), self.cat_ids)
        clock.lap("adapter", self.device)
        velocities: list[torch.Tensor] = []

        def on_step(i: int, v: torch.Tensor) -> None:
            velocities.append(v)
            clock.lap(f"dit_step_{i}", self.device)

        action_pred = head.sample(vl_embs, state_features, self.cat_ids, inputs.noise.to(self.device), on_step)
        return {"pixel_values": inputs.pixel_values, "input_ids": inputs.input_ids, "state": inputs.state,
                "noise": inputs.noise, "vision_features": vision, "vit_embeds": vit_embeds,
                "backbone_features": backbone_features, "vl_embs": vl_embs, "state_features": state_features,
                **{f"velocity_{i}": v for i, v in enumerate(velocities)}, "action_pred": action_pred}

    def get_action(self, obs: Observation, *, noise=None, seed: int | None = None,
                   state_dtype: str = "float64") -> PolicyResult:
        clock = Stopwatch()
        inputs = self.prepare(obs, noise=noise, seed=seed, state_dtype=state_dtype)
        clock.lap("preprocess")
        taps = self.infer(inputs, clock)
        action_pred, actions = self.finish(taps["action_pred"], inputs)
        clock.lap("postprocess")
        return PolicyResult(actions=actions, action_pred=action_pred, noise_source=inputs.noise_source,
                            seed=inputs.seed, seq_len=int(inputs.input_ids.shape[1]),
                            prompt_tokens=inputs.prompt_tokens, timing_ms=clock.ms, taps=taps)
