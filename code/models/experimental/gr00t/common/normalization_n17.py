# SPDX-License-Identifier: Apache-2.0
"""N1.7 state normalisation and action decoding, with statistics read from the checkpoint
(``statistics.json``, ``processor_config.json``, ``embodiment_id.json``), as NVIDIA's N1.7 ``StateActionProcessor``
does it (Isaac-GR00T ``n1.7-release``, ``gr00t/data/state_action/state_action_processor.py``).

State: per key ``2 (x − q01) / (q99 − q01) − 1`` (0 where q99 ≈ q01), clipped to [−1, 1], keys
concatenated in layout order and zero-padded. Actions: the model chunk is clipped to [−1, 1] and
min–max un-normalised per key — relative keys with the per-step ``relative_action`` min/max, absolute
keys with the ``action`` q01/q99 — then relative keys are composed onto the request's raw state.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .checkpoint import read_json
from .errors import ConfigError
from .layouts import Layout
from .pose import compose_eef9d, relative_eef9d

# The eval image chain this reference implements; a checkpoint asking for another is refused rather
# than silently served with a different chain (without the image keys, upstream's defaults give another one, e.g.
# crop 230/256 ≈ 0.898 from image_crop_size / image_target_size in gr00t/model/gr00t_n1d7/image_augmentations.py).
SUPPORTED_PROCESSOR = {"use_albumentations": True, "shortest_image_edge": 256, "crop_fraction": 0.95,
                       "formalize_language": True, "use_percentiles": True, "clip_outliers": True,
                       "use_relative_action": True}
# Settings that would change the chain when present and true (absent means false upstream).
UNSUPPORTED_IF_TRUE = ("letter_box_transform", "use_mean_std", "apply_sincos_state_encoding", "exclude_state")
REPS = {"relative_eef9d": ("RELATIVE", "EEF", "XYZ_ROT6D"), "absolute": ("ABSOLUTE", "NON_EEF", "DEFAULT"),
        "relative_add": ("RELATIVE", "NON_EEF", "DEFAULT")}


def check_processor_config(path: Path, processor: dict, layout: Layout) -> None:
    """Refuse a processor config whose chain or modality layout differs from what this reference does."""
    for key, want in SUPPORTED_PROCESSOR.items():
        if processor.get(key) != want:
            raise ConfigError(f"{path}: {key}={processor.get(key)!r}; this implementation supports only {want!r}")
    for key in UNSUPPORTED_IF_TRUE:
        if processor.get(key):
            raise ConfigError(f"{path}: {key}={processor[key]!r} is not supported")
    try:
        modality = processor["modality_configs"][layout.embodiment]
        video, state, action = modality["video"], modality["state"], modality["action"]
        got = {"video keys": list(video["modality_keys"]), "video deltas": list(video["delta_indices"]),
               "state keys": list(state["modality_keys"]), "action keys": list(action["modality_keys"]),
               "action reps": [(c["rep"], c["type"], c["format"], c["state_key"]) for c in action["action_configs"]]}
    except (KeyError, TypeError):
        raise ConfigError(f"{path}: no complete modality config for {layout.embodiment!r}") from None
    want = {"video keys": list(layout.cameras), "video deltas": [-15, 0],
            "state keys": [k for k, _ in layout.state_groups], "action keys": [k for k, _ in layout.action_groups],
            "action reps": [(*REPS[rep], key) for key, rep in layout.action_reps]}
    for what, value in want.items():
        if got[what] != value:
            raise ConfigError(f"{path}: {layout.embodiment} {what} are {got[what]}, this layout serves {value}")


def _load(path: Path) -> dict:
    return read_json(path, "part of an N1.7 checkpoint")


@dataclass(frozen=True)
class DroidStats:
    state_q01: dict[str, np.ndarray]
    state_q99: dict[str, np.ndarray]
    action_lo: dict[str, np.ndarray]  # [dim] (absolute keys) or [horizon, dim] (relative keys)
    action_hi: dict[str, np.ndarray]

    @classmethod
    def from_checkpoint(cls, directory: str | Path, layout: Layout, horizon: int) -> "DroidStats":
        directory = Path(directory)
        processor = _load(directory / "processor_config.json").get("processor_kwargs", {})
        check_processor_config(directory / "processor_config.json", processor, layout)
        ids = _load(directory / "embodiment_id.json")
        if ids.get(layout.embodiment) != layout.embodiment_id:
            raise ConfigError(f"{directory / 'embodiment_id.json'}: {layout.embodiment!r} maps to "
                              f"{ids.get(layout.embodiment)!r}, expected {layout.embodiment_id}")
        path = directory / "statistics.json"
        try:
            stats = _load(path)[layout.embodiment]
            q01 = {k: np.asarray(stats["state"][k]["q01"], np.float64) for k, _ in layout.state_groups}
            q99 = {k: np.asarray(stats["state"][k]["q99"], np.float64) for k, _ in layout.state_groups}
            lo, hi = {}, {}
            for key, rep in layout.action_reps:
                if rep == "absolute":
                    lo[key] = np.asarray(stats["action"][key]["q01"], np.float64)
                    hi[key] = np.asarray(stats["action"][key]["q99"], np.float64)
                else:  # the per-step relative statistics replace the percentiles wholesale (as upstream does)
                    lo[key] = np.asarray(stats["relative_action"][key]["min"], np.float64)
                    hi[key] = np.asarray(stats["relative_action"][key]["max"], np.float64)
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"{path}: missing statistics for {layout.embodiment!r} ({exc})") from None
        dims = dict(layout.action_groups)
        for key, rep in layout.action_reps:
            want = (dims[key],) if rep == "absolute" else (horizon, dims[key])
            if lo[key].shape != want or hi[key].shape != want:
                raise ConfigError(f"{path}: {key} statistics have shape {list(lo[key].shape)}, expected {list(want)}")
        for key, dim in layout.state_groups:
            if q01[key].shape != (dim,) or q99[key].shape != (dim,):
                raise ConfigError(f"{path}: state {key} statistics should have {dim} dims")
        return cls(q01, q99, lo, hi)


def _min_max(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, flat_atol: float) -> np.ndarray:
    """``2·(x − lo)/(hi − lo) − 1`` clipped to [−1, 1]; 0 where the range is flat (``|hi − lo| <= flat_atol``)."""
    span = hi - lo
    flat = np.abs(span) <= flat_atol
    return np.clip(np.where(flat, 0.0, 2.0 * (x - lo) / np.where(flat, 1.0, span) - 1.0), -1.0, 1.0)


def normalize_state(state: dict[str, np.ndarray], stats: DroidStats, layout: Layout,
                    max_state_dim: int) -> torch.Tensor:
    """Raw state → [1, 1, max_state_dim] float32."""
    parts = []
    for key, dim in layout.state_groups:
        x = np.asarray(state[key], np.float64).reshape(dim)
        # flat: np.isclose(span, 0.0) (atol 1e-8), without its general-case overhead
        parts.append(_min_max(x, stats.state_q01[key], stats.state_q99[key], flat_atol=1e-8))
    vec = np.concatenate(parts)
    padded = np.zeros(max_state_dim, np.float64)
    padded[: vec.size] = vec
    return torch.from_numpy(padded).to(torch.float32).view(1, 1, max_state_dim)


def decode_actions(chunk: np.ndarray, state: dict[str, np.ndarray], stats: DroidStats,
                   layout: Layout) -> dict[str, np.ndarray]:
    """Model chunk [horizon, action_dim] → absolute actions per key (float32 [horizon, dim])."""
    out, start = {}, 0
    reps = dict(layout.action_reps)
    for key, dim in layout.action_groups:
        y = np.clip(np.asarray(chunk[:, start:start + dim], np.float64), -1.0, 1.0)
        start += dim
        a = (y + 1.0) / 2.0 * (stats.action_hi[key] - stats.action_lo[key]) + stats.action_lo[key]
        current = np.asarray(state[key], np.float64).reshape(dim)
        if reps[key] == "relative_eef9d":
            a = compose_eef9d(current, a)
        elif reps[key] == "relative_add":
            a = current + a
        out[key] = a.astype(np.float32)
    return out


def encode_actions(actions: dict[str, np.ndarray], state: dict[str, np.ndarray], stats: DroidStats,
                   layout: Layout) -> np.ndarray:
    """The inverse of ``decode_actions`` for the first ``d`` steps of a chunk: absolute actions per key
    (float [d, dim]) that should run at steps 0 … d−1 of the chunk answering ``state`` → model space float32
    [d, action_dim]. Relative keys are re-expressed against ``state`` (``relative_eef9d``: ``T_state⁻¹ T_abs``;
    ``relative_add``: minus the state) and normalised with the statistics of steps 0 … d−1; absolute keys with
    their q01/q99. Values outside [−1, 1] are clipped, as ``decode_actions`` would read them (an action outside
    the statistics' range at that step cannot be reproduced exactly); a key whose range is empty maps to 0."""
    reps, parts = dict(layout.action_reps), []
    d = len(next(iter(actions.values())))
    for key, dim in layout.action_groups:
        a = np.asarray(actions[key], np.float64).reshape(d, dim)
        current = np.asarray(state[key], np.float64).reshape(dim)
        if reps[key] == "relative_eef9d":
            a = relative_eef9d(current, a)
        elif reps[key] == "relative_add":
            a = a - current
        lo, hi = stats.action_lo[key], stats.action_hi[key]
        if lo.ndim == 2:  # per-step relative statistics: the new chunk's steps 0 … d−1
            lo, hi = lo[:d], hi[:d]
        parts.append(_min_max(a, lo, hi, flat_atol=1e-12))
    return np.concatenate(parts, axis=-1).astype(np.float32)
