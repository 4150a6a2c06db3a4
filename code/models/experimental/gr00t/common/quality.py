# SPDX-License-Identifier: Apache-2.0
"""The one place for comparison metrics and their thresholds (computed in float64)."""

from __future__ import annotations

import numpy as np
import torch

# Thresholds used across tests and gates.
FP32_REFERENCE_ATOL = 1e-5  # our fp32 blocks vs transformers' modules on the same weights
FP32_ACTION_ATOL = 1e-4  # fp32 actions vs another fp32 implementation


def _f64(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def max_abs_diff(a, b) -> float:
    a, b = _f64(a), _f64(b)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {a.shape} vs {b.shape}")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def pcc(a, b) -> float:
    """Pearson correlation of the flattened arrays; 1.0 when both are constant and equal."""
    a, b = _f64(a).ravel(), _f64(b).ravel()
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {a.shape} vs {b.shape}")
    a, b = a - a.mean(), b - b.mean()
    denom = np.sqrt((a * a).sum() * (b * b).sum())
    if denom == 0.0:
        return 1.0 if np.array_equal(a, b) else 0.0
    return float((a * b).sum() / denom)


def relative_rmse(a, b) -> float:
    """RMSE(a − b) / RMS(b), with b the reference."""
    a, b = _f64(a), _f64(b)
    ref = np.sqrt(np.mean(b * b))
    err = np.sqrt(np.mean((a - b) ** 2))
    return float(err / ref) if ref > 0 else float(err)
