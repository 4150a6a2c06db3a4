# SPDX-License-Identifier: Apache-2.0
"""The four Metal traces on a p150a (skips without one): traced == untraced bit for bit, five replays
bit-identical, and alternating observations A → B → A give A's answer again (no state leaks between
requests through the persistent buffers)."""

from __future__ import annotations

import pytest
import torch

from models.experimental.gr00t.tests.device_fixtures import build_policy, observations


@pytest.fixture(scope="module")
def inputs_ab(p150, device_checkpoint, tt_cache_root):
    untraced = build_policy(p150, device_checkpoint, tt_cache_root, traced=False)
    obs_a, obs_b, noise = observations(untraced.layout)
    a, b = untraced.prepare(obs_a, noise=noise), untraced.prepare(obs_b, noise=noise)
    host = lambda i: untraced.model.host_inputs(i.pixel_values, i.input_ids, i.state, i.noise)  # noqa: E731
    want_a = untraced.runner.run(host(a)).clone()
    want_b = untraced.runner.run(host(b)).clone()
    traced = build_policy(p150, device_checkpoint, tt_cache_root, traced=True)
    traced.model.write_inputs(traced.model.host_inputs(a.pixel_values, a.input_ids, a.state, a.noise))
    traced.runner.capture()
    host_t = lambda i: traced.model.host_inputs(i.pixel_values, i.input_ids, i.state, i.noise)  # noqa: E731
    yield traced, host_t(a), host_t(b), want_a, want_b
    traced.runner.release()


def test_traced_equals_untraced(inputs_ab):
    traced, a, b, want_a, want_b = inputs_ab
    assert torch.equal(traced.runner.run(a), want_a)
    assert torch.equal(traced.runner.run(b), want_b)


def test_five_replays_are_bit_identical(inputs_ab):
    traced, a, _, _, _ = inputs_ab
    first = traced.runner.run(a)
    for _ in range(4):
        assert torch.equal(traced.runner.run(a), first)


def test_alternating_inputs_do_not_leak(inputs_ab):
    traced, a, b, want_a, want_b = inputs_ab
    assert not torch.equal(want_a, want_b)  # the two observations really differ
    for host, want in ((a, want_a), (b, want_b), (a, want_a), (b, want_b)):
        assert torch.equal(traced.runner.run(host), want)


def test_a_captured_model_refuses_untraced_calls(inputs_ab):
    traced, _, _, _, _ = inputs_ab
    with pytest.raises(RuntimeError, match="captured traces"):
        traced.model.forward()
