# SPDX-License-Identifier: Apache-2.0
"""What every policy shares, whatever the version or the backend: the prepared inputs, the one result
type, the initial noise, the ``Policy`` protocol and the one JSON form of a result.

A policy is three steps: ``prepare`` (host: validate and encode, raising ``InputError`` before any model
work), ``infer`` (the model: returns every stage boundary as a named tap, ``action_pred`` among them)
and ``finish`` (host: the model-space chunk → un-normalised actions). The fp32 reference, the torch fast
path and the TT-NN policy implement it alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from .errors import InputError
from .flow_matching import explicit_noise, seeded_noise
from .rtc import GuidedPrefix, InpaintPrefix
from .timing import Stopwatch


@dataclass
class PreparedInputs:
    """Everything the model needs for one request, built and validated on the host."""

    pixel_values: torch.Tensor  # [N_img, 3, 224, 224] float32 (N1.7: patches)
    input_ids: torch.Tensor  # [1, S] int64
    state: torch.Tensor  # [1, 1, max_state_dim] float32
    noise: torch.Tensor  # [1, horizon, action_dim] float32
    prompt_tokens: int
    noise_source: str  # "seed" or "client"
    seed: int | None
    raw_state: dict[str, np.ndarray] = field(default_factory=dict)  # N1.7 composes relative actions onto it
    image_grid_thw: torch.Tensor | None = None  # N1.7: [N_img, 3] patch grid per image
    inpaint: InpaintPrefix | None = None  # RTC's inpainting variant: target and frozen-row mask (reference sampler)
    guide: GuidedPrefix | None = None  # RTC's guided variant: target, soft weights and beta (reference sampler)


@dataclass
class PolicyResult:
    """One answer: from a policy's ``get_action`` or a server backend's ``predict``."""

    actions: dict[str, np.ndarray]  # group → float32 [horizon, dim], physical units
    action_pred: np.ndarray  # float32 [horizon, action_dim], normalised model space
    noise_source: str
    seed: int | None
    seq_len: int
    prompt_tokens: int
    timing_ms: dict[str, float] = field(default_factory=dict)
    taps: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 1  # how many requests shared the model call that computed this one (micro-batching)


class Policy(Protocol):
    layout: Any
    config: Any

    def prepare(self, obs, *, noise=None, seed: int | None = None, state_dtype: str = "float64") -> PreparedInputs:
        """Validate and encode one observation; raises ``InputError`` before any model work."""

    def infer(self, inputs: PreparedInputs, clock: Stopwatch | None = None) -> dict[str, Any]:
        """Run the model; every stage boundary as a named tap, ``action_pred`` [1, H, D] among them (a policy
        that takes stacked inputs, see ``stack_inputs``, returns [B, H, D])."""

    def finish(self, action_pred, inputs: PreparedInputs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Model-space chunk [1, H, D] → (float32 [H, D], un-normalised actions per group)."""


def batch_key(inputs: PreparedInputs) -> tuple:
    """Requests with equal keys can run as one batch: the same prompt length, image tensor shape, image
    grids and RTC variant (guided: also its beta; the masks and weights are per row, so any delays mix), so
    stacking needs no padding and no attention mask, and every row computes exactly what it would alone, up to
    the GEMMs' summation order."""
    grid = None if inputs.image_grid_thw is None else tuple(map(tuple, inputs.image_grid_thw.tolist()))
    rtc = "inpaint" if inputs.inpaint is not None else ("guided", inputs.guide.beta) if inputs.guide else None
    pv = inputs.pixel_values  # N1.6: a list of [3, H, W] when a request's images differ in shape
    images = tuple(pv.shape) if isinstance(pv, torch.Tensor) else tuple(tuple(im.shape) for im in pv)
    return tuple(inputs.input_ids.shape), images, grid, rtc


def stack_inputs(batch: list[PreparedInputs]) -> PreparedInputs:
    """B prepared requests of one ``batch_key`` → one ``PreparedInputs`` whose batch rows are the requests in
    order (images concatenated on their first axis, which the models split back per row)."""
    if len({batch_key(p) for p in batch}) != 1:
        raise ValueError("stack_inputs takes requests of one batch_key (prompt length, images, RTC variant)")
    first = batch[0]
    return PreparedInputs(
        pixel_values=torch.cat([p.pixel_values for p in batch]) if isinstance(first.pixel_values, torch.Tensor)
        else [im for p in batch for im in p.pixel_values], input_ids=torch.cat([p.input_ids for p in batch]),
        state=torch.cat([p.state for p in batch]), noise=torch.cat([p.noise for p in batch]),
        prompt_tokens=first.prompt_tokens, noise_source=first.noise_source, seed=first.seed,
        image_grid_thw=None if first.image_grid_thw is None else torch.cat([p.image_grid_thw for p in batch]),
        inpaint=None if first.inpaint is None else InpaintPrefix.stack([p.inpaint for p in batch]),
        guide=None if first.guide is None else GuidedPrefix.stack([p.guide for p in batch]))


def check_noise_or_seed(noise, seed) -> None:
    """The one rule every caller of a policy (and every protocol of the server) applies: at most one of them."""
    if noise is not None and seed is not None:
        raise InputError("noise", "give either noise or seed, not both")


def initial_noise(noise, seed: int | None, default_seed: int, horizon: int, action_dim: int):
    """(noise [1, H, D], "client" | "seed", the seed used or None): explicit noise wins, else a seed."""
    check_noise_or_seed(noise, seed)
    if noise is not None:
        return explicit_noise(noise, horizon, action_dim), "client", None
    seed = default_seed if seed is None else seed
    return seeded_noise(seed, horizon, action_dim), "seed", seed


def result_to_json(result: PolicyResult, normalized: bool = True) -> dict[str, Any]:
    """The answer part of a result, JSON-ready (float32 values widen to Python floats exactly). Every
    writer of results (the server, its goldens, run_reference.py, make_demo.py) starts from this.
    ``normalized=False`` leaves out ``action_pred_normalized`` (N1.7: 5,280 floats to list)."""
    answer = {"seq_len": result.seq_len, "prompt_tokens": result.prompt_tokens, "noise_source": result.noise_source,
              "actions": {k: v.tolist() for k, v in result.actions.items()}}
    if normalized:
        answer["action_pred_normalized"] = result.action_pred.tolist()
    return answer


def get_action(policy: Policy, obs, *, noise=None, seed: int | None = None, state_dtype: str = "float64"
               ) -> PolicyResult:
    """prepare → infer → finish, timed (``preprocess``, the model's laps, ``postprocess``), with every tap."""
    clock = Stopwatch()
    inputs = policy.prepare(obs, noise=noise, seed=seed, state_dtype=state_dtype)
    clock.lap("preprocess")
    return run_prepared(policy, inputs, clock)


def run_prepared(policy: Policy, inputs: PreparedInputs, clock: Stopwatch | None = None) -> PolicyResult:
    """infer → finish for inputs already prepared (and possibly given an RTC prefix), timed, with every tap."""
    clock = clock or Stopwatch()
    taps = policy.infer(inputs, clock)
    action_pred, actions = policy.finish(taps["action_pred"], inputs)
    clock.lap("postprocess")
    return PolicyResult(actions=actions, action_pred=action_pred, noise_source=inputs.noise_source,
                        seed=inputs.seed, seq_len=int(inputs.input_ids.shape[1]),
                        prompt_tokens=inputs.prompt_tokens, timing_ms=clock.ms, taps=taps)
