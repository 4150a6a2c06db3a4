# SPDX-License-Identifier: Apache-2.0
"""End-effector poses as ``eef_9d = [x, y, z, rot6d]`` and their relative ↔ absolute composition.

GR00T N1.7's DROID layout (NVIDIA's ``gr00t/data/state_action/droid_frame.py`` and the relative-action
decoding of ``StateActionProcessor``): ``rot6d`` is the first two *rows* of the rotation matrix, row-major,
and a relative action chunk is composed on the right of the current pose, ``T_abs = T_ref @ T_rel`` (body
frame). Everything is numpy float64.
"""

from __future__ import annotations

import numpy as np


def rot6d_to_matrix(r6: np.ndarray) -> np.ndarray:
    """[..., 6] → rotation matrices [..., 3, 3] by Gram–Schmidt on the two rows.

    A model's rot6d is not orthonormal; this projects it onto a proper rotation (det +1): the first
    row keeps its direction, the second loses its component along the first, the third is their
    cross product. A zero or degenerate input gives NaNs (the caller validates state)."""
    r6 = np.asarray(r6, dtype=np.float64)
    a1 = r6[..., 0:3] / np.linalg.norm(r6[..., 0:3], axis=-1, keepdims=True)
    b2 = r6[..., 3:6]
    a2 = b2 - np.sum(a1 * b2, axis=-1, keepdims=True) * a1
    a2 = a2 / np.linalg.norm(a2, axis=-1, keepdims=True)
    a3 = np.cross(a1, a2)
    return np.stack([a1, a2, a3], axis=-2)


def matrix_to_rot6d(rotation: np.ndarray) -> np.ndarray:
    """[..., 3, 3] → [..., 6]: rows 0 and 1, concatenated."""
    rotation = np.asarray(rotation, dtype=np.float64)
    return rotation[..., :2, :].reshape(*rotation.shape[:-2], 6)


def split_eef9d(eef: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[..., 9] → (translation [..., 3], rotation [..., 3, 3])."""
    eef = np.asarray(eef, dtype=np.float64)
    return eef[..., 0:3], rot6d_to_matrix(eef[..., 3:9])


def join_eef9d(translation: np.ndarray, rotation: np.ndarray) -> np.ndarray:
    return np.concatenate([translation, matrix_to_rot6d(rotation)], axis=-1)


def compose_eef9d(reference: np.ndarray, relative: np.ndarray) -> np.ndarray:
    """Current pose [..., 9] and relative chunk [..., H, 9] → absolute chunk [..., H, 9].

    ``R_abs = R_ref R_rel``, ``t_abs = R_ref t_rel + t_ref``. Both rotations are re-orthonormalised
    first, as upstream does (it also round-trips through scipy's ``Rotation``, a no-op to ~1e-16)."""
    t_ref, r_ref = split_eef9d(np.asarray(reference)[..., None, :])  # [..., 1, 3], [..., 1, 3, 3]
    t_rel, r_rel = split_eef9d(relative)
    r_abs = r_ref @ r_rel
    t_abs = (r_ref @ t_rel[..., None])[..., 0] + t_ref
    return join_eef9d(t_abs, r_abs)


def relative_eef9d(reference: np.ndarray, absolute: np.ndarray) -> np.ndarray:
    """Inverse of ``compose_eef9d``: ``T_rel = T_ref⁻¹ T_abs``, i.e. ``R_rel = R_refᵀ R_abs``,
    ``t_rel = R_refᵀ (t_abs − t_ref)`` (how upstream builds the training targets)."""
    t_ref, r_ref = split_eef9d(np.asarray(reference)[..., None, :])
    t_abs, r_abs = split_eef9d(absolute)
    r_ref_t = np.swapaxes(r_ref, -1, -2)
    return join_eef9d((r_ref_t @ (t_abs - t_ref)[..., None])[..., 0], r_ref_t @ r_abs)
