# SPDX-License-Identifier: Apache-2.0
"""The one interface the engine talks to. A backend owns the model and the device; the engine calls it
from a single thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass
class BackendResult:
    action_pred: np.ndarray  # float32 [horizon, action_dim], normalised model space
    actions: dict[str, np.ndarray]  # group → float32 [horizon, dim], physical units
    seq_len: int
    prompt_tokens: int
    noise_source: str
    seed: int | None
    timing_ms: dict[str, float] = field(default_factory=dict)  # encode / device / decode_actions


class Backend(Protocol):
    """Everything the engine uses; ``close`` runs at shutdown on the thread that owns the device."""

    name: str
    mock: bool  # a mock device: ops validated, nothing computed (the gate is skipped)
    is_reference: bool  # this backend is the fp32 CPU reference (its answer is the golden)
    reference_policy: Any  # an fp32 reference sharing this backend's weights, or None

    @property
    def action_shape(self) -> tuple[int, int]:
        """(horizon, action_dim) of the model-space chunk."""

    def predict(self, observation: Any, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> BackendResult:
        """Validate and encode (raising ``InputError`` before any device work), run, un-normalise."""

    @property
    def stage(self) -> str:
        """What is served, in one word for /info's top-level ``stage`` (``reference-fp32-cpu``,
        ``fast-bf16-cuda``, ``stage1-ttnn-traces``, ...), as the published package reports it."""

    def describe(self) -> dict:
        """Backend, device, dtype policy and why they were chosen (for /info)."""

    def close(self) -> None:
        """Release what the backend holds (traces, device, weights); safe to call twice."""
