# SPDX-License-Identifier: Apache-2.0
"""The N1.6 host chain every N1.6 policy shares (the fp32 reference ``reference/torch_policy_n16``, the TT-NN
``tt/ttnn_policy_n16``): one embodiment tag's files read from the checkpoint (``N16Host.from_checkpoint``: the
processor flags, the tag's processing and statistics, its layout row checked against the file), then per request
frames in the modality config's camera order → the N1.6 image chain → the prompt with its ``<IMG_CONTEXT>`` runs →
the encoded state → the initial noise (``prepare``), and at the end the model's 50 × 128 chunk → the tag's rows and
the decoded actions (``finish``); RTC's prefix re-expressed against a new state (``frozen_prefix``). Spec
``gr00t_n16.md`` §3–§10; the decisions are in ``torch_policy_n16``'s docstring."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from .checkpoint import read_json
from .configs_n16 import PROCESSOR_FILE, Gr00tN16Config, Gr00tN16ProcessorConfig
from .errors import ConfigError, InputError
from .layouts import N16_LAYOUTS, Layout
from .normalization import STATE_DTYPES
from .normalization_n16 import N16Processing, N16Stats, decode_actions, encode_actions, encode_state
from .observation import FLOAT32_MAX, Observation
from .policy import PreparedInputs, initial_noise
from .preprocessing_n16 import N16ImageChain, vlm_frame_order
from .prompts_n16 import n16_prompt_ids


def check_layout(layout: Layout, processing: N16Processing, directory: Path) -> Layout:
    """``layout`` (the tag's row) against the checkpoint's modality config for the tag; the row with the file's
    category id. A disagreement is a ``ConfigError`` naming both."""
    modality = read_json(directory / PROCESSOR_FILE, "the N1.6 processor config")["processor_kwargs"][
        "modality_configs"][processing.tag]
    video = modality.get("video") or {}
    file_view = {"cameras": tuple(video.get("modality_keys") or ()), "frames": len(video.get("delta_indices") or ()),
                 "state": tuple((k.name, k.dim) for k in processing.state_keys),
                 "action": tuple((k.name, k.dim) for k in processing.action_keys)}
    row_view = {"cameras": layout.cameras, "frames": layout.frames_per_camera, "state": layout.state_groups,
                "action": layout.action_groups}
    wrong = [k for k in file_view if file_view[k] != row_view[k]]
    if wrong:
        raise ConfigError(f"{directory / PROCESSOR_FILE}: tag {processing.tag!r} disagrees with layout "
                          f"{layout.name!r} on {', '.join(wrong)}: file {[file_view[k] for k in wrong]}, "
                          f"layout {[row_view[k] for k in wrong]}")
    return dataclasses.replace(layout, embodiment_id=processing.embodiment_id)


def raw_state_of(obs: Observation, layout: Layout, state_dtype: str) -> dict[str, np.ndarray]:
    """The request's state per group as float64 (D,), after the ``state_dtype`` the client's values were meant in;
    groups and widths checked against the layout (``parse_state`` already did for server requests)."""
    if state_dtype not in STATE_DTYPES:
        raise InputError("state_dtype", f"must be one of {sorted(STATE_DTYPES)}")
    expected = [name for name, _ in layout.state_groups]
    if sorted(obs.state) != sorted(expected):
        raise InputError("state", f"has groups {sorted(obs.state)}; this layout expects {expected}")
    out = {}
    for name, dim in layout.state_groups:
        x = np.asarray(obs.state[name], dtype=STATE_DTYPES[state_dtype]).astype(np.float64).reshape(-1)
        if x.shape != (dim,):
            raise InputError(f"state.{name}", f"has {x.size} values; expected {dim}")
        if not (np.isfinite(x).all() and (np.abs(x) <= FLOAT32_MAX).all()):
            raise InputError(f"state.{name}", "contains a value that is not finite in float32")
        out[name] = x
    return out


def n16_layout_row(embodiment: str | None = None, layout: str | None = None) -> Layout:
    """The N1.6 layout row of tag ``embodiment``, or of the N1.6 layout named ``layout`` (which wins)."""
    if layout is not None:
        rows = {row.name: row for row in N16_LAYOUTS.values()}
        if layout not in rows:
            raise ConfigError(f"unknown N1.6 layout {layout!r}: known are {sorted(rows)}")
        return rows[layout]
    if embodiment not in N16_LAYOUTS:
        raise ConfigError(f"N1.6 embodiment {embodiment!r} has no layout: served tags are {sorted(N16_LAYOUTS)}")
    return N16_LAYOUTS[embodiment]


@dataclass(frozen=True)
class N16Host:
    """One tag's host chain over a checkpoint's files: ``layout`` is the tag's row with the file's category id
    (``check_layout``), ``processing`` / ``stats`` the tag's (``N16Processing.from_checkpoint``), ``processor`` the
    processor flags (image chain, language formalisation)."""

    config: Gr00tN16Config
    layout: Layout
    stats: N16Stats
    processing: N16Processing
    processor: Gr00tN16ProcessorConfig
    checkpoint_dir: Path

    @classmethod
    def from_checkpoint(cls, directory: str | Path, layout: Layout, config: Gr00tN16Config | None = None) -> "N16Host":
        """``layout``'s tag (an ``N16_LAYOUTS`` row) on ``directory``'s checkpoint; the row checked against the file."""
        directory = Path(directory)
        config = config or Gr00tN16Config.from_checkpoint(directory)
        processing, stats = N16Processing.from_checkpoint(directory, layout.embodiment)
        return cls(config, check_layout(layout, processing, directory), stats, processing,
                   Gr00tN16ProcessorConfig.from_checkpoint(directory), directory)

    @cached_property
    def image_chain(self) -> N16ImageChain:
        return N16ImageChain.from_configs(self.processor, self.config.backbone)

    @property
    def chunk_shape(self) -> tuple[int, int]:
        """The tag's horizon (GR1 16, G1 30, bridge 8) × the model's 128 columns: the rows ``finish`` returns and an
        RTC prefix may cover; the noise still covers all 50 rows of the envelope."""
        return self.processing.horizon, self.config.action_head.action_dim

    def modality_config(self) -> dict:
        """The tag's entry of ``processor_config.json``'s ``modality_configs``, as NVIDIA's N1.6 policy returns it to
        ``get_modality_config`` (the ZMQ endpoint sends it verbatim)."""
        return read_json(self.checkpoint_dir / PROCESSOR_FILE, "the N1.6 processor config")["processor_kwargs"][
            "modality_configs"][self.processing.tag]

    def frames(self, obs: Observation) -> list[np.ndarray]:
        """One list, time-major, camera-minor in the layout's (= the modality config's) camera order."""
        missing = [cam for cam in self.layout.cameras if cam not in obs.images]
        if missing:
            raise InputError(f"images.{missing[0]}", f"missing; this layout expects {list(self.layout.cameras)}")
        views = [obs.images[cam] for cam in self.layout.cameras]
        for cam, view in zip(self.layout.cameras, views):
            if len(view) != self.layout.frames_per_camera:
                raise InputError(f"images.{cam}", f"has {len(view)} frame(s); this layout takes exactly "
                                                  f"{self.layout.frames_per_camera}")
        return vlm_frame_order(views)

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        """Validate and encode one observation; raises ``InputError`` before any model work."""
        h = self.config.action_head
        x0, source, seed = initial_noise(noise, seed, self.layout.default_seed, h.action_horizon, h.action_dim)
        raw_state = raw_state_of(obs, self.layout, state_dtype)
        names = [cam for cam in self.layout.cameras for _ in range(self.layout.frames_per_camera)]
        images = self.image_chain(self.frames(obs), names)
        factor = self.image_chain.factor
        prompt = n16_prompt_ids(obs.instruction, [(im.shape[1] // factor) * (im.shape[2] // factor) for im in images],
                                formalize=self.processor.formalize_language,
                                max_text_tokens=self.layout.max_text_tokens)
        state = torch.from_numpy(encode_state(raw_state, self.stats, self.processing)).reshape(1, 1, -1)
        pixel_values = torch.stack(images) if len({im.shape for im in images}) == 1 else images
        return PreparedInputs(pixel_values, torch.tensor([prompt.input_ids], dtype=torch.int64), state, x0,
                              prompt.text_tokens, source, seed, raw_state=raw_state)

    def finish(self, action_pred: torch.Tensor, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Model chunk [1, 50, 128] → (float32 [H, 128]: the tag's rows, every column; actions per group)."""
        chunk = action_pred[0].float().cpu().numpy()
        return (np.ascontiguousarray(chunk[:self.processing.horizon]),
                decode_actions(chunk, inputs.raw_state, self.stats, self.processing))

    def frozen_prefix(self, last_normalized, last_actions, steps: slice, inputs) -> np.ndarray:
        """RTC's target [d, 128] for a new request (``inputs``): the previous chunk's absolute actions at ``steps``
        re-expressed against this request's state (``normalization_n16.encode_actions``), the previous rows' own
        padding columns kept."""
        target = np.array(last_normalized[steps], dtype=np.float32)
        head = encode_actions({k: np.asarray(v)[steps] for k, v in last_actions.items()}, inputs.raw_state,
                              self.stats, self.processing)
        target[:, :head.shape[1]] = head
        return target

    def frame_grids(self, layout: Layout | None = None) -> tuple[tuple[int, int], ...]:
        """The (h, w) patch grid of every image of a request whose frames have the layout's wire size (GR1 256×256
        → 252×252 → 18×18), through this checkpoint's image chain (its shortest edge and crop fraction): the static
        geometry a TT model is built for. ``ConfigError`` for a tag without a known frame size (unitree_g1)."""
        layout = layout or self.layout
        hw = layout.wire.image_hw if layout.wire is not None else None
        if hw is None:
            raise ConfigError(f"layout {layout.name!r} has no fixed frame size: the TT model needs static image grids")
        h, w = self.image_chain.output_size(*hw)
        p = self.config.backbone.vision.patch_size
        return ((h // p, w // p),) * layout.n_images
