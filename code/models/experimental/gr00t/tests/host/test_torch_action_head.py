# SPDX-License-Identifier: Apache-2.0
"""Action-head pieces against direct formulas: embodiment-specific linears, the action-encoder
sinusoid, and the Euler schedule."""

from __future__ import annotations

import math

import numpy as np
import torch
from models.experimental.gr00t.common.flow_matching import seeded_noise, step_size, timestep_buckets
from models.experimental.gr00t.reference.torch_action_head import CategorySpecificLinear, action_sinusoid


def test_schedule_is_four_buckets_of_a_quarter():
    assert timestep_buckets(4, 1000) == [0, 250, 500, 750]
    assert step_size(4) == 0.25


def test_category_specific_linear_uses_the_embodiment_row_untransposed():
    layer = CategorySpecificLinear(32, 5, 3)
    with torch.no_grad():
        layer.W.copy_(torch.randn(32, 5, 3))
        layer.b.copy_(torch.randn(32, 3))
    x = torch.randn(2, 4, 5)
    ids = torch.tensor([24, 3])
    got = layer(x, ids)
    for row, cat in enumerate(ids.tolist()):
        np.testing.assert_allclose(got[row].detach().numpy(), (x[row] @ layer.W[cat] + layer.b[cat]).detach().numpy(),
                                   atol=1e-6)


def test_action_sinusoid_is_sin_first_over_half_width():
    dim, bucket = 64, 250
    got = action_sinusoid(torch.full((1, 16), bucket), dim)[0, 0].numpy()
    k = np.arange(dim // 2)
    freqs = bucket * np.exp(-k * math.log(10000.0) / (dim // 2))
    np.testing.assert_allclose(got, np.concatenate([np.sin(freqs), np.cos(freqs)]), atol=1e-5)


def test_seeded_noise_is_a_cpu_generator_stream():
    a, b = seeded_noise(0, 16, 32), seeded_noise(0, 16, 32)
    assert a.shape == (1, 16, 32) and torch.equal(a, b)
    assert torch.equal(a, torch.randn((1, 16, 32), generator=torch.Generator().manual_seed(0)))
    assert not torch.equal(a, seeded_noise(1, 16, 32))
