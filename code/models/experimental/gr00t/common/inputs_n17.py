# SPDX-License-Identifier: Apache-2.0
"""The N1.7 DROID host chain every N1.7 policy shares (reference, TT-NN): frames in the VLM's order, the DROID
eval chain and Qwen patches, the chat prompt, the normalised state, the initial noise; and at the end the
model-space chunk → absolute actions composed onto the request's state."""

from __future__ import annotations

import numpy as np
import torch

from .configs_n17 import Gr00tN17Config
from .errors import InputError
from .host_threads import frame_map
from .layouts import Layout
from .normalization_n17 import DroidStats, decode_actions, encode_actions, normalize_state
from .observation import Observation, check_aspect
from .policy import PreparedInputs, initial_noise
from .pose import rot6d_to_matrix
from .preprocessing_n17 import droid_frame, qwen_pixel_values
from .prompts import encode_n17_prompt


def droid_frames(obs: Observation, layout: Layout) -> list[np.ndarray]:
    """Time-major, camera-minor: [ext(t−15), wrist(t−15), ext(t), wrist(t)]."""
    for cam in layout.cameras:
        for i, f in enumerate(obs.images[cam]):
            check_aspect(f"images.{cam}[{i}]", *f.shape[:2], layout)  # parsing checked it; library callers too
    return [obs.images[cam][t] for t in range(layout.frames_per_camera) for cam in layout.cameras]


def prepare_n17(config: Gr00tN17Config, layout: Layout, stats: DroidStats, obs: Observation, *, noise=None,
                seed: int | None = None, state_dtype: str = "float64") -> PreparedInputs:
    """Validate and encode one N1.7 observation; raises ``InputError`` before any model work."""
    h, v = config.action_head, config.backbone.vision
    x0, source, seed = initial_noise(noise, seed, layout.default_seed, h.action_horizon, h.action_dim)
    frames = droid_frames(obs, layout)
    raw_state = {k: np.asarray(x, dtype={"float64": np.float64, "float32": np.float32}[state_dtype]).astype(np.float64)
                 for k, x in obs.state.items()}
    check_pose(raw_state)
    pixel_values, grid = qwen_pixel_values(frame_map(droid_frame, frames), v.patch_size, v.temporal_patch_size,
                                           v.spatial_merge_size)
    merge = v.spatial_merge_size**2
    prompt = encode_n17_prompt(obs.instruction, tokens_per_image=[int(g.prod()) // merge for g in grid],
                               max_text_tokens=layout.max_text_tokens)
    state = normalize_state(raw_state, stats, layout, h.max_state_dim)
    return PreparedInputs(pixel_values, torch.tensor([prompt.input_ids], dtype=torch.int64), state, x0,
                          prompt.text_tokens, source, seed, raw_state=raw_state, image_grid_thw=grid)


def finish_n17(action_pred: torch.Tensor, inputs: PreparedInputs, stats: DroidStats,
               layout: Layout) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Model-space chunk [1, H, D] → (float32 [H, D], absolute actions per group)."""
    chunk = action_pred[0].float().cpu().numpy()
    return chunk, decode_actions(chunk, inputs.raw_state, stats, layout)


def check_pose(state: dict[str, np.ndarray]) -> None:
    """The current end-effector rotation must be a usable rot6d (two non-parallel rows)."""
    r6 = state["eef_9d"][3:9]
    a, b = r6[:3], r6[3:]
    if (np.linalg.norm(a) < 1e-6
            or np.linalg.norm(np.cross(a, b)) < 1e-6 * np.linalg.norm(a) * max(np.linalg.norm(b), 1e-12)):
        raise InputError("state.eef_9d", "rotation rows (dims 3-8) must be non-zero and not parallel")
    if not np.isfinite(rot6d_to_matrix(r6)).all():
        raise InputError("state.eef_9d", "rotation (dims 3-8) is not a valid rot6d")


def frozen_prefix_n17(last_normalized: np.ndarray, last_actions: dict[str, np.ndarray], steps: slice, inputs,
                      stats: DroidStats, layout: Layout) -> np.ndarray:
    """RTC's inpainting target [d, action_dim] for a new N1.7 request (``inputs``): N1.7's actions are relative to
    the request's state, so the previous chunk's **absolute** actions at ``steps`` are re-expressed against this
    request's state and normalised with the statistics of the new chunk's first steps (``encode_actions``, the
    inverse of the decoding); the padding dimensions (no action reads them) keep the previous chunk's values."""
    target = np.array(last_normalized[steps], dtype=np.float32)  # padding dims: the previous rows' own
    head = encode_actions({k: v[steps] for k, v in last_actions.items()}, inputs.raw_state, stats, layout)
    target[:, :head.shape[1]] = head
    return target
