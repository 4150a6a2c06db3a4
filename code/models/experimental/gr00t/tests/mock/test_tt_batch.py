# SPDX-License-Identifier: Apache-2.0
"""Several requests in one call of the TT model (a micro-batching bucket), every version that builds buckets: every
per-request buffer gets a leading batch axis, the DiT's cross-attention packs the batch along the key axis with
block-diagonal masks (its per-head weights take an activation whose batch dims are 1). Proven without a card: the TT
module code at batch 2 runs with ttnn's golden functions, on two requests that differ in instruction length, state,
noise and RTC prefix, and every tap of every row equals the same request run alone at batch 1; the same model
validates on the mock P150. A batch short of its bucket repeats its last request. A version whose TT model runs one
request per call (N1.6) refuses a bucket."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from models.experimental.gr00t.common.rtc import InpaintPrefix
from models.experimental.gr00t.common.versions import SPECS

pytestmark = pytest.mark.mock

OTHER_INSTRUCTION = {"n15": "pick up the red cup and put it in the sink", "n17": "Open the top drawer"}
# the versions whose TT model builds batch buckets (``VersionSpec.tt_max_batch`` > 1); N1.6 runs one request per call
BATCHED = sorted(v for v, spec in SPECS.items() if spec.ttnn and spec.tt_max_batch > 1)
SINGLE = sorted(v for v, spec in SPECS.items() if spec.ttnn and spec.tt_max_batch == 1)


@pytest.mark.parametrize("version", SINGLE)
def test_a_version_without_batch_buckets_refuses_one(version, tiny_checkpoints, tiny_policies):
    """Its TT model refuses batch > 1 when built (the TT backend builds bucket 1 only for it and turns
    GR00T_MAX_BATCH > 1 off with the reason: ``gr00t_p150/tests/test_ttnn_mock.py``)."""
    ref = tiny_policies[version]
    with pytest.raises(ValueError, match="one request per call"):
        golden(tiny_checkpoints[version], ref, 2)


@pytest.fixture(scope="module", params=BATCHED)
def case(request, tiny_checkpoints):
    """(version, checkpoint, reference policy, two requests' prepared inputs: the demo one, and one with another
    instruction (another prompt length), state, noise and an RTC prefix)."""
    from models.experimental.gr00t.common.demo import load_demo_request
    from models.experimental.gr00t.common.observation import parse_observation
    from models.experimental.gr00t.common.versions import get_spec, load

    version = request.param
    checkpoint = tiny_checkpoints[version]
    ref = load(get_spec(version).policy_cls).from_checkpoint(checkpoint)
    demo = load_demo_request(version)
    first = ref.prepare(parse_observation(demo, ref.layout), noise=demo["noise"])
    other = {**demo, "instruction": OTHER_INSTRUCTION[version],
             "state": {k: (np.asarray(v, np.float64) * 0.5 + 0.01).tolist() for k, v in demo["state"].items()}}
    second = ref.prepare(parse_observation({k: v for k, v in other.items() if k != "noise"}, ref.layout), seed=11)
    assert first.input_ids.shape[1] != second.input_ids.shape[1]  # the packed masks must keep the prompts apart
    horizon, dim = second.noise.shape[1:]
    rows = torch.randn(3, dim, generator=torch.Generator().manual_seed(3)).numpy()
    second = dataclasses.replace(second, inpaint=InpaintPrefix.build(rows, horizon))
    return version, checkpoint, ref, [first, second]


def golden(checkpoint, ref, batch: int):
    from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
    from models.experimental.gr00t.tt.tools.golden_ops import golden_tt_model

    return golden_tt_model(LazyCheckpoint(checkpoint), ref.config, ref.layout, "fp32", batch=batch)


def run(model, rows) -> dict:
    """Every tap of one forward over ``rows`` (a list of one-request ``PreparedInputs``, any prompt lengths, as the
    TT backend hands a micro-batch over)."""
    with model.execution():
        model.write_inputs(model.host_inputs_for(list(rows)))
        taps: dict = {}
        model.forward(taps)
    return taps


def test_batched_rows_equal_each_request_alone_at_every_tap(mock_device, case):
    version, checkpoint, ref, requests = case
    batched = run(golden(checkpoint, ref, 2), requests)
    single = golden(checkpoint, ref, 1)
    alone = [run(single, [r]) for r in requests]
    worst = {}
    for name, t in batched.items():
        if not isinstance(t, torch.Tensor) or t.shape[0] != 2:
            continue
        for b in range(2):
            want = alone[b][name].float()
            got = t[b:b + 1].float().reshape(want.shape)
            worst[name] = max(worst.get(name, 0.0), float((got - want).abs().max() / (want.abs().max() + 1e-30)))
    print(f"{version}: batch 2 vs alone, max |d| / peak per tap:", {k: f"{v:.1e}" for k, v in worst.items()})
    assert {"vl_embs", "backbone_features", "velocity_0", "velocity_3", "action_pred"} <= set(worst)
    assert all(v <= 1e-5 for v in worst.values()), worst
    # and the rows really differ (two requests, not one twice), the second one's RTC rows frozen exactly
    assert (batched["action_pred"][0] - batched["action_pred"][1]).abs().max() > 1e-2
    target = requests[1].inpaint.target[0]
    assert torch.equal(batched["action_pred"][1][:3].float(), target[:3])


def test_a_batch_whose_requests_saw_each_other_would_be_caught(mock_device, case):
    """The comparison has teeth: with the packed cross masks opened up (every query sees both requests' keys) the
    rows no longer equal the requests alone."""
    version, checkpoint, ref, requests = case
    model = golden(checkpoint, ref, 2)
    with model.execution():
        host = model.combine([model.host_tensors_for(r) for r in requests])
        for name in model.PACKED_INPUTS:
            host[name].zero_()
        model.write_inputs(host)
        taps: dict = {}
        model.forward(taps)
    alone = run(golden(checkpoint, ref, 1), [requests[0]])
    assert torch.equal(taps["vl_embs"][0:1], alone["vl_embs"])  # before the DiT the rows are independent
    assert (taps["action_pred"][0:1] - alone["action_pred"]).abs().max() > 1e-3


def test_a_short_batch_repeats_its_last_request(mock_device, case):
    """``host_inputs_for`` of one request into a batch-2 model: row 1 is row 0 again."""
    version, checkpoint, ref, requests = case
    model = golden(checkpoint, ref, 2)
    with model.execution():
        host = model.host_inputs_for(requests[0])
    for name, t in host.items():
        if name in model.PACKED_INPUTS:
            half = t.shape[-1] // 2
            assert torch.equal(t[..., :t.shape[-2] // 2, :half], t[..., t.shape[-2] // 2:, half:])
            assert torch.isinf(t[..., :t.shape[-2] // 2, half:]).all()  # no request sees the other's keys
        else:
            assert torch.equal(t[0], t[1]), name


def test_a_batched_model_validates_on_the_mock_p150(mock_device, case, tmp_path_factory):
    """The batch-2 model's every op, program config and buffer on the mock P150 (tiny scale); the outputs keep
    their batch axis."""
    import ttnn

    from models.experimental.gr00t.common.versions import get_spec, load
    from models.experimental.gr00t.tt.policy import TTPolicy
    from models.experimental.gr00t.tt.ttnn_policy import build_tt_model, device_weights

    version, checkpoint, ref, requests = case
    weights = device_weights(checkpoint, mock_device, tmp_path_factory.mktemp(f"tt-cache-b2-{version}"),
                             f"tiny-{version}", TTPolicy(), ref.layout, lambda _: None)
    model = build_tt_model(weights, ref.config, ref.layout, batch=2)
    model.write_inputs(model.combine([model.host_tensors_for(r) for r in requests]))
    taps: dict = {}
    model.forward(taps)
    ttnn.synchronize_device(mock_device)
    h, d = ref.config.action_head.action_horizon, ref.config.action_head.action_dim
    assert tuple(taps["action_pred"].shape) == (2, h, d)
    assert tuple(model.read_actions().shape) == (2, h, d)
    assert load(get_spec(version).tt_policy_cls) is not None
