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
from ..common.errors import InputError
from ..common.layouts import get_layout
from ..common.normalization_n17 import DroidStats, decode_actions, normalize_state
from ..common.observation import Observation, check_aspect
from ..common.pose import rot6d_to_matrix
from ..common.preprocessing_n17 import droid_frame, qwen_pixel_values
from ..common.prompts import encode_n17_prompt
from ..common.policy import PreparedInputs, initial_noise
from ..common.synthetic import synthetic_info
from ..common.timing import Stopwatch
from .torch_gr00t_n17 import Gr00tN17
from .policy import ReferencePolicyBase


class ReferencePolicyN17(ReferencePolicyBase):
    """N1.7 DROID: the shared life cycle (``get_action`` = prepare → infer → finish) with N1.7's own
    checkpoint files, host chain, model and action decoding."""

    @classmethod
    def from_checkpoint(cls, directory: str | Path, layout: str = "droid", device: str = "cpu") -> "ReferencePolicyN17":
        directory = Path(directory)
        config = Gr00tN17Config.from_checkpoint(directory)
        lay = get_layout(layout)
        stats = DroidStats.from_checkpoint(directory, lay, config.action_head.action_horizon)
        model = Gr00tN17.from_checkpoint(LazyCheckpoint(directory), config, dtype=torch.float32).to(device)
        return cls(model, config, lay, stats, directory, synthetic_info(directory))

    # ---- host side -------------------------------------------------------------------------
    def frames(self, obs: Observation) -> list[np.ndarray]:
        """Time-major, camera-minor: [ext(t−15), wrist(t−15), ext(t), wrist(t)]."""
        lay = self.layout
        for cam in lay.cameras:
            for i, f in enumerate(obs.images[cam]):
                check_aspect(f"images.{cam}[{i}]", *f.shape[:2], lay)  # parsing checked it; library callers too
        return [obs.images[cam][t] for t in range(lay.frames_per_camera) for cam in lay.cameras]

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        h, v = self.config.action_head, self.config.backbone.vision
        x0, source, seed = initial_noise(noise, seed, self.layout.default_seed, h.action_horizon, h.action_dim)
        frames = self.frames(obs)
        raw_state = {k: np.asarray(x, dtype={"float64": np.float64,
                                             "float32": np.float32}[state_dtype]).astype(np.float64)
                     for k, x in obs.state.items()}
        _check_pose(raw_state)
        pixel_values, grid = qwen_pixel_values([droid_frame(f) for f in frames], v.patch_size, v.temporal_patch_size,
                                               v.spatial_merge_size)
        merge = v.spatial_merge_size**2
        prompt = encode_n17_prompt(obs.instruction, tokens_per_image=[int(g.prod()) // merge for g in grid],
                                   max_text_tokens=self.layout.max_text_tokens)
        state = normalize_state(raw_state, self.stats, self.layout, h.max_state_dim)
        return PreparedInputs(pixel_values, torch.tensor([prompt.input_ids], dtype=torch.int64), state, x0,
                              prompt.text_tokens, source, seed, raw_state=raw_state, image_grid_thw=grid)

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        chunk = action_pred[0].float().cpu().numpy()
        return chunk, decode_actions(chunk, inputs.raw_state, self.stats, self.layout)

    # ---- the model -------------------------------------------------------------------------
    @torch.inference_mode()
    def infer(self, inputs: PreparedInputs, clock: Stopwatch | None = None) -> dict[str, torch.Tensor]:
        clock = clock or Stopwatch()
        head, dev = self.model.action_head, self.device
        out = self.model.backbone(inputs.input_ids.to(dev), inputs.pixel_values.to(dev), inputs.image_grid_thw.to(dev),
                                  after_vision=lambda: clock.lap("vision", dev))
        clock.lap("llm", dev)
        vl_embs = head.condition(out["backbone_features"])
        state_features = head.state_encoder(inputs.state.to(dev), self.cat_ids)
        image_mask = out["image_mask"]
        key_masks = {"text": ~image_mask, "image": image_mask}  # batch 1, no padding
        clock.lap("adapter", dev)
        velocities: list[torch.Tensor] = []

        def on_step(i: int, v: torch.Tensor) -> None:
            velocities.append(v)
            clock.lap(f"dit_step_{i}", dev)

        action_pred = head.sample(vl_embs, state_features, self.cat_ids, inputs.noise.to(dev), on_step, key_masks)
        return {"pixel_values": inputs.pixel_values, "input_ids": inputs.input_ids, "state": inputs.state,
                "noise": inputs.noise, "vision_embeds": out["vision_embeds"],
                "backbone_features": out["backbone_features"], "vl_embs": vl_embs, "state_features": state_features,
                **{f"velocity_{i}": v for i, v in enumerate(velocities)}, "action_pred": action_pred}


def _check_pose(state: dict[str, np.ndarray]) -> None:
    """The current end-effector rotation must be a usable rot6d (two non-parallel rows)."""
    r6 = state["eef_9d"][3:9]
    a, b = r6[:3], r6[3:]
    if (np.linalg.norm(a) < 1e-6
            or np.linalg.norm(np.cross(a, b)) < 1e-6 * np.linalg.norm(a) * max(np.linalg.norm(b), 1e-12)):
        raise InputError("state.eef_9d", "rotation rows (dims 3-8) must be non-zero and not parallel")
    if not np.isfinite(rot6d_to_matrix(r6)).all():
        raise InputError("state.eef_9d", "rotation (dims 3-8) is not a valid rot6d")
