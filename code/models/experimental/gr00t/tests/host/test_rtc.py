# SPDX-License-Identifier: Apache-2.0
"""Real-time chunking's guided variant (``common/rtc.py``) against the paper's formulas written out here, and
its sampler against a finite-difference directional derivative of the DiT (no autograd on the checking side)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from models.experimental.gr00t.common.layouts import GR1
from models.experimental.gr00t.common.observation import parse_observation
from models.experimental.gr00t.common.rtc import (GuidedPrefix, InpaintPrefix, guidance_weight, guided_step,
                                                  prefix_weights)


def test_prefix_weights_follow_the_papers_soft_mask():
    """W_i = 1 for i < d; c_i·(e^{c_i} − 1)/(e − 1) with c_i = (H − s − i)/(H − s − d + 1) for d ≤ i < H − s; 0 after
    (H − s is our overlap: the previous chunk's rows still ahead)."""
    horizon, d, overlap = 16, 3, 11
    w = prefix_weights(d, overlap, horizon)
    for i in range(horizon):
        if i < d:
            want = 1.0
        elif i < overlap:
            c = (overlap - i) / (overlap - d + 1)
            want = c * (math.exp(c) - 1) / (math.e - 1)
        else:
            want = 0.0
        assert w[i] == pytest.approx(want, abs=1e-7), i
    assert np.all(np.diff(w) <= 0) and 0 < w[overlap - 1] < w[d] < 1  # decays inside the overlap
    assert prefix_weights(0, 0, 8).sum() == 0 and prefix_weights(8, 8, 8).sum() == 8
    with pytest.raises(ValueError):
        prefix_weights(5, 4, 16)


def test_guidance_weight_is_clipped_at_beta():
    assert guidance_weight(0.0, 5.0) == 5.0 and guidance_weight(1.0, 5.0) == 0.0
    for tau in (0.25, 0.5, 0.75, 0.9):
        r2 = (1 - tau) ** 2 / (tau**2 + (1 - tau) ** 2)
        assert guidance_weight(tau, 100.0) == pytest.approx((1 - tau) / (tau * r2))
        assert guidance_weight(tau, 1.0) == min(1.0, (1 - tau) / (tau * r2))


def test_build_places_the_overlap_at_row_zero_and_stack_keeps_rows():
    rows = np.arange(10 * 4, dtype=np.float32).reshape(10, 4)
    g = GuidedPrefix.build(rows, frozen=2, horizon=16, beta=3.0)
    assert g.target.shape == (1, 16, 4) and g.weights.shape == (1, 16)
    assert torch.equal(g.target[0, :10], torch.from_numpy(rows)) and not g.target[0, 10:].any()
    assert g.weights[0, 10:].sum() == 0 and g.weights[0, :2].tolist() == [1.0, 1.0]
    both = GuidedPrefix.stack([g, GuidedPrefix.build(rows[:5], 1, 16, 3.0)])
    assert both.target.shape == (2, 16, 4) and both.weights[1, 5:].sum() == 0
    with pytest.raises(ValueError):
        GuidedPrefix.stack([g, GuidedPrefix.build(rows, 2, 16, 5.0)])


def test_inpaint_prefix_is_a_fixed_shape_target_and_row_mask():
    rows = np.ones((3, 4), dtype=np.float32)
    p = InpaintPrefix.build(rows, horizon=16)
    assert p.target.shape == (1, 16, 4) and p.mask.shape == (1, 16) and p.frozen == [3]
    assert p.mask[0, :3].tolist() == [1.0] * 3 and not p.mask[0, 3:].any() and not p.target[0, 3:].any()
    both = InpaintPrefix.stack([p, InpaintPrefix.build(rows[:1], 16)])
    assert both.target.shape == (2, 16, 4) and both.frozen == [3, 1]
    with pytest.raises(ValueError):
        InpaintPrefix.build(np.ones((17, 4), np.float32), 16)


def test_masked_inpainting_equals_the_row_replacement_written_out(tiny_policy, gr1_request):
    """The sampler's masked form against the replacement written directly (concatenating the frozen rows'
    ``(1 − τ)·noise + τ·target`` with the free rows before every step, the targets after the last): bit for bit."""
    from models.experimental.gr00t.common.flow_matching import step_size, timestep_buckets

    head = tiny_policy.model.action_head
    vl, sf, ids, noise = _conditioning(tiny_policy, parse_observation(gr1_request, GR1))
    d, (horizon, dim) = 5, noise.shape[1:]
    target = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (1, d, dim)).astype(np.float32))
    c = head.config
    with torch.inference_mode():
        got = head.sample(vl, sf, ids, noise, inpaint=InpaintPrefix.build(target[0].numpy(), horizon))
        x = noise.clone()
        for i, bucket in enumerate(timestep_buckets(c.num_inference_timesteps, c.num_timestep_buckets)):
            tau = i / c.num_inference_timesteps
            x = torch.cat([(1 - tau) * noise[:, :d] + tau * target, x[:, d:]], dim=1)
            x = x + step_size(c.num_inference_timesteps) * head.velocity(x, bucket, vl, sf, ids)
        want = torch.cat([target, x[:, d:]], dim=1)
    assert torch.equal(got, want)


def _conditioning(policy, obs):
    """vl_embs, state_features, cat_ids and a noise for the tiny N1.5 head (float64 for finite differences)."""
    inputs = policy.prepare(obs, seed=7)
    with torch.inference_mode():
        taps = policy.infer(inputs)
    return taps["vl_embs"].clone(), taps["state_features"].clone(), policy.cat_ids, inputs.noise.clone()


def test_guided_step_gradient_equals_a_finite_difference_of_the_dit(tiny_policy, gr1_request):
    """g = ((Y − x̂)·W)ᵀ ∂x̂/∂x from autograd equals, along random directions u, the central difference
    ⟨(Y − x̂)·W, (x̂(x + εu) − x̂(x − εu)) / 2ε⟩ of the DiT's one-step estimate x̂ = x + (1 − τ)v(x), in float64."""
    head = tiny_policy.model.action_head
    vl, sf, ids, noise = _conditioning(tiny_policy, parse_observation(gr1_request, GR1))
    head64 = head.double()
    try:
        vl, sf, x = vl.double(), sf.double(), noise.double()
        tau, bucket = 0.25, 250
        horizon, dim = x.shape[1:]
        gen = torch.Generator().manual_seed(0)
        guide = GuidedPrefix(torch.randn(1, horizon, dim, generator=gen, dtype=torch.float64),
                             torch.from_numpy(prefix_weights(4, 12, horizon)).double()[None], beta=5.0)

        def velocity(a):
            return head64.velocity(a, bucket, vl, sf, ids)

        x_next, v = guided_step(velocity, x, tau, 0.25, guide)
        with torch.no_grad():
            g = (x_next - x - 0.25 * v) / (0.25 * guidance_weight(tau, 5.0))
            x1 = x + (1 - tau) * velocity(x)
            error = (guide.target - x1) * guide.weights.unsqueeze(-1)
            eps = 1e-5
            for k in range(3):
                u = torch.randn(x.shape, generator=gen, dtype=torch.float64)
                def estimate(a):
                    return a + (1 - tau) * velocity(a)

                fd = (error * (estimate(x + eps * u) - estimate(x - eps * u)) / (2 * eps)).sum().item()
                assert (g * u).sum().item() == pytest.approx(fd, rel=1e-6), k
    finally:
        head.float()


def test_guided_sampler_with_zero_weights_is_the_plain_sampler_bit_for_bit(tiny_policy, gr1_request):
    """With every weight 0 the guidance term is exactly zero, so the guided sampler (autograd on, inference mode
    off) must give the plain sampler's chunk bit for bit: the conditioning copies change no value."""
    obs = parse_observation(gr1_request, GR1)
    plain = tiny_policy.get_action(obs, seed=3)
    inputs = tiny_policy.prepare(obs, seed=3)
    horizon, dim = inputs.noise.shape[1:]
    inputs.guide = GuidedPrefix(torch.ones(1, horizon, dim), torch.zeros(1, horizon), beta=5.0)
    with torch.inference_mode():
        taps = tiny_policy.infer(inputs)
    assert torch.equal(taps["action_pred"].float(), torch.from_numpy(plain.action_pred)[None])


def test_guided_sampler_pulls_the_frozen_rows_to_the_target(tiny_policy, gr1_request):
    """A target far from the plain answer: guided sampling lands the weight-1 rows much closer to it than the
    plain sampler does, and leaves the rows past the overlap (weight 0) the model's own (they move only through
    the attention to the guided rows, by less than the guided rows move)."""
    obs = parse_observation(gr1_request, GR1)
    plain = torch.from_numpy(tiny_policy.get_action(obs, seed=3).action_pred)
    inputs = tiny_policy.prepare(obs, seed=3)
    horizon, dim = inputs.noise.shape[1:]
    target = torch.full((horizon, dim), 0.5)
    inputs.guide = GuidedPrefix.build(target[:8].numpy(), frozen=4, horizon=horizon)
    with torch.inference_mode():
        guided = tiny_policy.infer(inputs)["action_pred"][0].float()
    before, after = (plain[:4] - 0.5).abs().max(), (guided[:4] - 0.5).abs().max()
    assert after < 0.2 * before, (before, after)
    assert (guided[8:] - plain[8:]).abs().max() < (guided[:4] - plain[:4]).abs().max()
