# SPDX-License-Identifier: Apache-2.0
"""Flow-matching schedule and initial noise (NVIDIA's ``FlowmatchingActionHead.get_action``,
``gr00t/model/action_head/flow_matching_action_head.py``).

t = 0 is noise, t = 1 is data. The DiT is evaluated at t = i / N for i < N, each t mapped to an integer
bucket ``int(t * num_buckets)`` (0, 250, 500, 750 for N = 4), and one Euler step ``x += dt · v`` follows.
NVIDIA draws the noise from the global RNG of the model's device; we take it as an input: either an
explicit tensor or a ``seed`` for a CPU ``torch.Generator`` (the same numbers on every machine).
"""

from __future__ import annotations

import numpy as np
import torch

from .errors import InputError


def timestep_buckets(num_steps: int, num_buckets: int = 1000) -> list[int]:
    # Same arithmetic as NVIDIA: t_cont = i / float(N); int(t_cont * buckets).
    return [int(i / float(num_steps) * num_buckets) for i in range(num_steps)]


def step_size(num_steps: int) -> float:
    return 1.0 / num_steps


def seeded_noise(seed: int, horizon: int, action_dim: int) -> torch.Tensor:
    """[1, horizon, action_dim] float32 standard normal from a CPU generator seeded with ``seed``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InputError("seed", "must be an integer in [0, 2**63)")
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn((1, horizon, action_dim), generator=g, dtype=torch.float32)


def explicit_noise(noise, horizon: int, action_dim: int) -> torch.Tensor:
    """Client-supplied initial noise [horizon][action_dim] (or [1][horizon][action_dim]) → [1, H, D]."""
    try:
        arr = np.asarray(noise, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("noise", f"must be a numeric array of shape [{horizon}][{action_dim}]") from None
    if arr.shape == (1, horizon, action_dim):
        arr = arr[0]
    if arr.shape != (horizon, action_dim):
        raise InputError("noise", f"has shape {list(arr.shape)}; expected [{horizon}][{action_dim}]")
    # finite in float64 can still overflow the float32 the model computes in
    if not (np.isfinite(arr).all() and np.abs(arr).max() <= np.finfo(np.float32).max):
        raise InputError("noise", "contains a value that is not finite in float32")
    return torch.from_numpy(arr).to(torch.float32).unsqueeze(0)
