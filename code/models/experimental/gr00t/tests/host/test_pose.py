# SPDX-License-Identifier: Apache-2.0
"""eef_9d composition equals 4×4 homogeneous-matrix algebra on rotations built independently
(Rodrigues' formula), with rot6d = the first two rows of R."""

from __future__ import annotations

import numpy as np
import pytest
from models.experimental.gr00t.common.pose import (
    compose_eef9d,
    matrix_to_rot6d,
    relative_eef9d,
    rot6d_to_matrix,
)

HORIZON = 40


def rodrigues(axis: np.ndarray, angle: float) -> np.ndarray:
    """R = I + sin θ K + (1 − cos θ) K², K the cross-product matrix of the unit axis."""
    x, y, z = axis / np.linalg.norm(axis)
    k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


def random_transforms(rng: np.random.Generator, n: int) -> np.ndarray:
    """n homogeneous transforms [n, 4, 4], rotations of any angle up to π about random axes."""
    out = np.tile(np.eye(4), (n, 1, 1))
    for i in range(n):
        out[i, :3, :3] = rodrigues(rng.normal(size=3), rng.uniform(-np.pi, np.pi))
        out[i, :3, 3] = rng.uniform(-1.0, 1.0, 3)
    return out


def to_eef9d(transform: np.ndarray) -> np.ndarray:
    """[..., 4, 4] → [..., 9] written out by hand: translation, then R's row 0 and row 1."""
    r = transform[..., :3, :3]
    return np.concatenate([transform[..., :3, 3], r[..., 0, :], r[..., 1, :]], axis=-1)


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)))


@pytest.fixture
def poses():
    rng = np.random.default_rng(0)
    return random_transforms(rng, 1)[0], random_transforms(rng, HORIZON)  # T_ref, T_rel chunk


def test_rot6d_is_the_first_two_rows_and_round_trips():
    r = rodrigues(np.array([0.3, -1.0, 0.5]), 2.0)
    r6 = matrix_to_rot6d(r)
    np.testing.assert_array_equal(r6, np.concatenate([r[0], r[1]]))
    assert max_abs(rot6d_to_matrix(r6), r) < 1e-12


def test_compose_equals_homogeneous_right_multiplication(poses):
    t_ref, t_rel = poses
    ours = compose_eef9d(to_eef9d(t_ref), to_eef9d(t_rel))
    expected = to_eef9d(t_ref @ t_rel)  # numpy broadcasts [4,4] @ [H,4,4]
    assert ours.shape == (HORIZON, 9) and ours.dtype == np.float64
    assert max_abs(ours, expected) < 1e-12


def test_compose_is_not_left_multiplication(poses):
    # Proves the body-frame convention: with non-commuting rotations T_rel @ T_ref is far away.
    t_ref, t_rel = poses
    ours = compose_eef9d(to_eef9d(t_ref), to_eef9d(t_rel))
    assert max_abs(ours, to_eef9d(t_rel @ t_ref)) > 0.1


def test_relative_equals_inverse_reference_times_absolute(poses):
    t_ref, t_abs = poses
    ours = relative_eef9d(to_eef9d(t_ref), to_eef9d(t_abs))
    assert max_abs(ours, to_eef9d(np.linalg.inv(t_ref) @ t_abs)) < 1e-12


def test_pose_to_relative_to_pose_round_trips(poses):
    t_ref, t_abs = poses
    ref, absolute = to_eef9d(t_ref), to_eef9d(t_abs)
    assert max_abs(compose_eef9d(ref, relative_eef9d(ref, absolute)), absolute) < 1e-9
    relative = absolute  # any chunk serves as a relative one too
    assert max_abs(relative_eef9d(ref, compose_eef9d(ref, relative)), relative) < 1e-9


def test_identity_reference_leaves_the_chunk_unchanged(poses):
    _, t_rel = poses
    assert max_abs(compose_eef9d(to_eef9d(np.eye(4)), to_eef9d(t_rel)), to_eef9d(t_rel)) < 1e-12


def test_batched_references_broadcast_per_chunk():
    rng = np.random.default_rng(3)
    t_ref, t_rel = random_transforms(rng, 2), random_transforms(rng, 2 * 5).reshape(2, 5, 4, 4)
    ours = compose_eef9d(to_eef9d(t_ref), to_eef9d(t_rel))  # [2, 9] with [2, 5, 9]
    assert ours.shape == (2, 5, 9)
    assert max_abs(ours, to_eef9d(t_ref[:, None] @ t_rel)) < 1e-12


def test_gram_schmidt_returns_proper_rotations_for_any_rot6d():
    rng = np.random.default_rng(1)
    r6 = rng.normal(size=(1000, 6)) * rng.uniform(0.01, 10.0, size=(1000, 1))  # nowhere near orthonormal
    r = rot6d_to_matrix(r6)
    assert max_abs(r @ np.swapaxes(r, -1, -2), np.broadcast_to(np.eye(3), r.shape)) < 1e-12
    assert max_abs(np.linalg.det(r), np.ones(1000)) < 1e-12
    # Gram–Schmidt, not a symmetric projection: row 0 keeps the first vector's direction, and row 1
    # lies in the plane of the two inputs on the side of the second.
    first, second = r6[:, :3], r6[:, 3:]
    assert max_abs(r[:, 0], first / np.linalg.norm(first, axis=1, keepdims=True)) < 1e-12
    assert max_abs(np.einsum("ni,ni->n", r[:, 2], second), np.zeros(1000)) < 1e-9
    assert (np.einsum("ni,ni->n", r[:, 1], second) > 0).all()


def test_non_orthonormal_relative_rotations_are_projected_before_composing(poses):
    t_ref, t_rel = poses
    noisy = to_eef9d(t_rel)
    noisy[:, 3:] = noisy[:, 3:] * 1.7 + 0.05  # scaled and skewed, as a model's raw output may be
    projected = np.tile(np.eye(4), (HORIZON, 1, 1))
    projected[:, :3, :3] = rot6d_to_matrix(noisy[:, 3:])
    projected[:, :3, 3] = noisy[:, :3]
    out = compose_eef9d(to_eef9d(t_ref), noisy)
    assert max_abs(out, to_eef9d(t_ref @ projected)) < 1e-12
    r_out = rot6d_to_matrix(out[:, 3:])
    assert max_abs(matrix_to_rot6d(r_out), out[:, 3:]) < 1e-12  # the output rot6d is already orthonormal
