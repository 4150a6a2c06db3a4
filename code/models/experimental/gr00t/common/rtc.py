# SPDX-License-Identifier: Apache-2.0
"""Real-time chunking's inputs for the sampler: the inpainting prefix (target + 0/1 row mask) and the guided
variant's soft prefix mask with its clipped guidance weight.

Black, Galliker, Levine, "Real-Time Execution of Action Chunking Flow Policies" (NeurIPS 2025,
arXiv 2506.07339), Algorithm 1. While a new chunk is computed the robot keeps executing the old one; the
new chunk should continue it. The old chunk's remaining rows (the *overlap*, shifted to start at the new
chunk's row 0) are a target ``Y``; rows the robot will surely execute during the inference delay (the first
``d``) are weighted 1, the rest of the overlap with exponentially decaying weights, rows past the overlap 0.
At every Euler step the sampler pulls the chunk towards ``Y`` along the vector-Jacobian product of the
one-step denoised estimate (``x + (1 − τ)·v``), scaled by a weight that follows the flow's variance and is
clipped at ``β`` (the paper's default is 5). Time runs as in GR00T: τ = 0 is noise, τ = 1 the actions.

The forward-only ``inpaint`` variant (``FlowmatchingActionHead.sample``) needs no gradient: its target and
row mask have the chunk's fixed shape [B, H, D] / [B, H] whatever the number of frozen rows, so one compiled or
traced denoise loop serves every delay with the two as persistent inputs, and requests with different delays
batch together. The replacement ``m·a + (1 − m)·x`` with ``m`` ∈ {0, 1} is exact (one term is a signed zero).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

DEFAULT_BETA = 5.0
VARIANTS = ("inpaint", "guided")


def prefix_weights(frozen: int, overlap: int, horizon: int) -> np.ndarray:
    """float32 [horizon]: 1 on the first ``frozen`` rows, ``c·(e^c − 1)/(e − 1)`` with
    ``c = (overlap − i)/(overlap − frozen + 1)`` from there to the end of the overlap, 0 after it."""
    if not 0 <= frozen <= overlap <= horizon:
        raise ValueError(f"need 0 <= frozen ({frozen}) <= overlap ({overlap}) <= horizon ({horizon})")
    i = np.arange(horizon, dtype=np.float64)
    c = np.clip((overlap - i) / (overlap - frozen + 1), 0.0, 1.0)
    w = c * np.expm1(c) / math.expm1(1.0)
    w[:frozen] = 1.0
    w[overlap:] = 0.0
    return w.astype(np.float32)


def guidance_weight(tau: float, beta: float) -> float:
    """``min(β, (1 − τ)/τ · 1/r²)`` with ``r² = (1 − τ)² / (τ² + (1 − τ)²)``; β at τ = 0 (the limit is ∞)."""
    if tau <= 0.0:
        return float(beta)
    if tau >= 1.0:
        return 0.0
    inv_r2 = (tau**2 + (1 - tau) ** 2) / (1 - tau) ** 2
    return float(min(beta, (1 - tau) / tau * inv_r2))


def absolute_prefix(last_normalized: np.ndarray, steps: slice) -> np.ndarray:
    """The inpainting target of a version whose actions are absolute (N1.5 GR1): the previous chunk's model-space
    rows at ``steps`` as they are (a version with state-relative actions re-expresses them: ``frozen_prefix_n17``)."""
    return np.ascontiguousarray(last_normalized[steps], dtype=np.float32)


@dataclass
class InpaintPrefix:
    """The inpainting variant for a batch: the target ``Y`` [B, H, D] (normalised; rows past the frozen ones
    arbitrary) and the row mask [B, H] (1 on the frozen rows, 0 elsewhere)."""

    target: torch.Tensor
    mask: torch.Tensor

    @classmethod
    def build(cls, frozen_rows: np.ndarray, horizon: int) -> InpaintPrefix:
        """One request: ``frozen_rows`` [d, D], the rows the new chunk must start with."""
        d, dim = frozen_rows.shape
        if not 0 < d <= horizon:
            raise ValueError(f"need 0 < frozen rows ({d}) <= horizon ({horizon})")
        target = np.zeros((horizon, dim), dtype=np.float32)
        target[:d] = frozen_rows
        mask = np.zeros(horizon, dtype=np.float32)
        mask[:d] = 1.0
        return cls(torch.from_numpy(target)[None], torch.from_numpy(mask)[None])

    @property
    def frozen(self) -> list[int]:
        return [int(n) for n in self.mask.sum(1).tolist()]

    @staticmethod
    def stack(prefixes: list[InpaintPrefix]) -> InpaintPrefix:
        return InpaintPrefix(torch.cat([p.target for p in prefixes]), torch.cat([p.mask for p in prefixes]))


@dataclass
class GuidedPrefix:
    """What the guided sampler needs for a batch: the target ``Y`` [B, H, D] (normalised, rows past the
    overlap arbitrary), the per-row weights [B, H] and β."""

    target: torch.Tensor
    weights: torch.Tensor
    beta: float = DEFAULT_BETA

    @classmethod
    def build(cls, overlap_rows: np.ndarray, frozen: int, horizon: int, beta: float = DEFAULT_BETA) -> GuidedPrefix:
        """One request: ``overlap_rows`` [overlap, D] are the previous chunk's rows still ahead of the robot."""
        overlap, dim = overlap_rows.shape
        if overlap > horizon:
            raise ValueError(f"the overlap ({overlap} rows) is longer than the horizon ({horizon})")
        target = np.zeros((horizon, dim), dtype=np.float32)
        target[:overlap] = overlap_rows
        weights = prefix_weights(frozen, overlap, horizon)
        return cls(torch.from_numpy(target)[None], torch.from_numpy(weights)[None], float(beta))

    @staticmethod
    def stack(guides: list[GuidedPrefix]) -> GuidedPrefix:
        if len({g.beta for g in guides}) != 1:
            raise ValueError("one batch shares one beta")
        return GuidedPrefix(torch.cat([g.target for g in guides]), torch.cat([g.weights for g in guides]),
                            guides[0].beta)


def guided_step(velocity, x: torch.Tensor, tau: float, dt: float, guide: GuidedPrefix) -> tuple[torch.Tensor,
                                                                                                  torch.Tensor]:
    """One Euler step with guidance: ``(x + dt·(v + w(τ)·g), v)`` where ``v = velocity(x)`` and
    ``g = ((Y − x̂)·W)ᵀ ∂x̂/∂x`` with ``x̂ = x + (1 − τ)·v`` (one vector-Jacobian product through the model).

    ``velocity`` must build an autograd graph: the caller runs this outside ``inference_mode`` with grad
    enabled, on inputs that are not inference tensors."""
    x_in = x.detach().requires_grad_(True)
    v = velocity(x_in)
    x1 = x_in + (1 - tau) * v
    target, weights = guide.target.to(x1), guide.weights.to(x1)
    error = ((target - x1) * weights.unsqueeze(-1)).detach()
    (g,) = torch.autograd.grad(x1, x_in, grad_outputs=error)
    v = v.detach()
    return (x + dt * (v + guidance_weight(tau, guide.beta) * g)).detach(), v
