# SPDX-License-Identifier: Apache-2.0
"""The four Metal traces of every version on a p150a (skips without one): traced == untraced bit for bit, five
replays bit-identical, alternating observations A → B → A give A's answer again (no state leaks between
requests through the persistent buffers), and the two-command-queue runner equals the one-queue runner bit for
bit (the published N1.7 package runs 2 CQs)."""

from __future__ import annotations

import pytest
import torch

from models.experimental.gr00t.tests.device_fixtures import build_policy, checkpoint_for, observations


@pytest.fixture(scope="module", params=["n15", "n16", "n17"])
def inputs_ab(request, p150, tt_cache_root):
    version = request.param
    checkpoint = checkpoint_for(version)
    untraced = build_policy(p150, checkpoint, tt_cache_root, traced=False, version=version)
    obs_a, obs_b, noise = observations(untraced.layout)
    a, b = untraced.prepare(obs_a, noise=noise), untraced.prepare(obs_b, noise=noise)
    want_a = untraced.runner.run(untraced.model.host_inputs_for(a)).clone()
    want_b = untraced.runner.run(untraced.model.host_inputs_for(b)).clone()
    traced = build_policy(p150, checkpoint, tt_cache_root, traced=True, version=version)
    traced.model.write_inputs(traced.model.host_inputs_for(a))
    traced.runner.capture()
    host = traced.model.host_inputs_for
    yield traced, host(a), host(b), want_a, want_b
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


def test_two_command_queues_equal_one(inputs_ab):
    """The same captured traces replayed with the inputs uploaded on CQ 1 (events per stage) and on CQ 0."""
    from models.experimental.gr00t.tt.runner import TTRunner

    traced, a, b, want_a, want_b = inputs_ab
    runners = {}
    for n in (1, 2):
        runners[n] = TTRunner(traced.model, traced=True, num_cqs=n)
        runners[n].traces = traced.runner.traces  # one capture, two upload protocols
    for host, want in ((a, want_a), (b, want_b), (a, want_a)):
        one, two = runners[1].run(host), runners[2].run(host)
        assert torch.equal(one, want) and torch.equal(two, want)


def test_a_captured_model_refuses_untraced_calls(inputs_ab):
    traced, _, _, _, _ = inputs_ab
    with pytest.raises(RuntimeError, match="captured traces"):
        traced.model.forward()
