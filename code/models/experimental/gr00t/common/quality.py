# SPDX-License-Identifier: Apache-2.0
"""The one place for comparison metrics and their thresholds (computed in float64)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

# Thresholds used across tests and gates.
FP32_REFERENCE_ATOL = 1e-5  # our fp32 blocks vs transformers' modules on the same weights
FP32_ACTION_ATOL = 1e-4  # fp32 actions vs another fp32 implementation
# The bf16 fast path (CUDA, or a CPU: the same numerics) vs the fp32 golden, per action group (tiny checkpoints)
BF16_ACTION_PCC_MIN = 0.9999

# The fp32 reference vs an fp32 golden it made on *another* machine (other CPU ISA, library kernels or
# thread count). oneDNN, MKL and ATen pick other kernels and summation orders per ISA, so the last bits
# differ: the shipped demo goldens (made on an AVX-512 CPU) and the same reference on a 2-core AVX2-only
# AMD EPYC (Zen 1) differ by at most 3.8e-6 in action units (1 - PCC <= 2e-13 per group); forcing oneDNN to
# SSE4.1 there changes them by up to 2.0e-6 vs native and they stay within 3.4e-6 of the golden. On one
# machine with the same software, the answer is bit-identical, and tests assert that bitwise. Both bounds
# must hold for every group; PCC is gated only where the golden group varies (spread >
# GOLDEN_PCC_SPREAD_MIN), since a constant group's PCC measures nothing.
GOLDEN_FP32_ATOL = 1e-5  # max |d|, action units (and normalised units for the model-space chunk)
GOLDEN_FP32_GROUP_PCC_MIN = 0.999999
GOLDEN_PCC_SPREAD_MIN = 1e-3

# A served backend vs the fp32 reference golden (the boot gate, and the p150a stage tests): per action
# group, PCC must reach SERVE_GROUP_PCC_MIN wherever the golden chunk varies by more than
# SERVE_GROUP_SPREAD_MIN (action units); a near-constant group's PCC measures noise, so it is only
# reported (as the published packages do). The fp32 reference meets it exactly; bf16 and TT-NN paths
# must earn it. TT_STAGE_PCC_GATES: the per-module PCC floors the p150a stage tests (tests/pcc) hold the
# TT-NN port to.
SERVE_GROUP_PCC_MIN = 0.9999
SERVE_GROUP_SPREAD_MIN = 0.2
TT_STAGE_PCC_GATES = {"vit_block_first": 0.9999, "vision_features": 0.993, "backbone_features": 0.995,
                      "vl_embs": 0.991, "action_pred": SERVE_GROUP_PCC_MIN}
# N1.7: the gates the published N1.7 package's card quotes for taps this port exposes (its gate file is not
# public): the first DeepStack merger 0.9998, the first LLM layer 0.991, the action groups 0.9998.
TT_STAGE_PCC_GATES_N17 = {"deepstack_0": 0.9998, "llm_layer_first": 0.991, "action_pred": 0.9998}


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


@dataclass(frozen=True)
class GoldenComparison:
    """``got`` vs a golden made elsewhere, per group: max |d|, PCC, the golden's spread."""

    per_group: dict[str, dict[str, float]]
    atol: float
    pcc_min: float

    @property
    def max_abs(self) -> float:
        return max((g["max_abs"] for g in self.per_group.values()), default=0.0)

    @property
    def failures(self) -> list[str]:
        bad = []
        for name, g in self.per_group.items():
            if not g["max_abs"] <= self.atol:
                bad.append(f"{name}: max |d| {g['max_abs']:.3g} > {self.atol:g}")
            if g["spread"] > GOLDEN_PCC_SPREAD_MIN and not g["pcc"] >= self.pcc_min:
                bad.append(f"{name}: PCC {g['pcc']:.9f} < {self.pcc_min}")
        return bad

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def bit_identical(self) -> bool:
        return all(g["max_abs"] == 0.0 for g in self.per_group.values())

    def summary(self) -> str:
        worst = max(self.per_group, key=lambda k: self.per_group[k]["max_abs"], default="-")
        one_minus = max((1.0 - g["pcc"] for g in self.per_group.values()), default=0.0)
        head = (f"max |d| {self.max_abs:.3g} ({worst}), max 1 - PCC {one_minus:.2g}; rule: max |d| <= {self.atol:g}"
                f" and PCC >= {self.pcc_min} per group")
        return head + ("" if self.ok else "; FAILED " + "; ".join(self.failures))


def compare_with_golden(got: dict, golden: dict, *, atol: float = GOLDEN_FP32_ATOL,
                        pcc_min: float = GOLDEN_FP32_GROUP_PCC_MIN) -> GoldenComparison:
    """Compare ``{group: array}`` with a golden of the same groups made on another machine.

    Groups must match exactly (a missing or extra group is a shape error, not a tolerance question)."""
    if set(got) != set(golden):
        raise ValueError(f"groups differ: {sorted(got)} vs golden {sorted(golden)}")
    per_group = {}
    for name in golden:
        ref = _f64(golden[name])
        per_group[name] = {"max_abs": max_abs_diff(got[name], ref), "pcc": pcc(got[name], ref),
                           "spread": float(np.ptp(ref)) if ref.size else 0.0}
    return GoldenComparison(per_group, atol, pcc_min)
