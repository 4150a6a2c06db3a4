# SPDX-License-Identifier: Apache-2.0
"""Real-time chunking's inpainting on TT-NN, proven against the fp32 reference's inpaint sampler without a card: the
TT module code (its RTC inputs written like any request's, ``where`` selects in the denoise stage) runs with
ttnn's golden functions (``tt/tools/golden_ops.py``) and must reproduce the reference at every Euler step, freeze
the prefix rows exactly, and follow the reference through a 10-chunk rollout planned by the server's own RTC
code. Every TT version: N1.5 (absolute actions), N1.6 and N1.7 (relative actions, re-expressed against each new
state)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from models.experimental.gr00t.common.quality import max_abs_diff
from models.experimental.gr00t.common.rtc import InpaintPrefix
from models.experimental.gr00t.common.versions import SPECS

from .tt_expect import reference_case

pytestmark = pytest.mark.mock

STEP_TAPS = ("velocity_0", "velocity_1", "velocity_2", "velocity_3", "action_pred")
FROZEN = 5  # rows of the previous chunk the new one must start with


@pytest.fixture(scope="module", params=sorted(v for v, spec in SPECS.items() if spec.ttnn))
def case(request, tiny_checkpoints):
    version = request.param
    checkpoint = tiny_checkpoints[version]
    ref, inputs, taps = reference_case(version, checkpoint)
    return version, checkpoint, ref, inputs, taps


def golden_model(checkpoint, ref, precision: str = "fp32"):
    from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
    from models.experimental.gr00t.tt.tools.golden_ops import golden_tt_model

    return golden_tt_model(LazyCheckpoint(checkpoint), ref.config, ref.layout, precision)


def tt_taps(model, inputs, mutate=None) -> dict:
    with model.execution():
        host = model.host_inputs_for(inputs)
        if mutate:
            mutate(host)
        model.write_inputs(host)
        taps: dict = {}
        model.forward(taps)
    return taps


def with_prefix(inputs, rows: np.ndarray):
    """``inputs`` (prepared by ``ref``) steered towards ``rows`` [d, D]: a fresh ``PreparedInputs`` with the inpaint
    prefix, as ``server/rtc.attach_rtc`` sets it."""
    import dataclasses

    return dataclasses.replace(inputs, inpaint=InpaintPrefix.build(rows, int(inputs.noise.shape[1])))


def previous_chunk(ref, inputs) -> np.ndarray:
    """A previous chunk to continue: the reference's answer to the same observation with other noise."""
    import dataclasses

    noise = torch.randn(inputs.noise.shape, generator=torch.Generator().manual_seed(7))
    return ref.infer(dataclasses.replace(inputs, noise=noise))["action_pred"][0].float().numpy()


def step_diffs(tt: dict, ref_taps: dict) -> dict[str, float]:
    """tap → max |d| relative to the reference tap's peak."""
    out = {}
    for name in STEP_TAPS:
        want = ref_taps[name].float()
        got = tt[name].float().reshape(want.shape)
        out[name] = max_abs_diff(got.numpy(), want.numpy()) / float(want.abs().max())
    return out


def test_inpaint_denoise_equals_the_reference_at_every_step(mock_device, case):
    version, checkpoint, ref, inputs, _ = case
    rtc = with_prefix(inputs, previous_chunk(ref, inputs)[:FROZEN])
    want = ref.infer(rtc)
    model = golden_model(checkpoint, ref)
    got = tt_taps(model, rtc)
    diffs = step_diffs(got, want)
    print(f"{version} golden TT inpaint vs fp32 reference inpaint, max |d| / peak per step:",
          ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
    assert all(v <= 1e-5 for v in diffs.values()), diffs
    # the frozen rows are the target exactly (a select, not arithmetic), the rest moved
    chunk, target = got["action_pred"][0].float(), rtc.inpaint.target[0]
    assert torch.equal(chunk[:FROZEN], target[:FROZEN])
    assert not torch.allclose(chunk[FROZEN:], target[FROZEN:])
    # and it differs from the un-steered chunk beyond the frozen rows: the denoiser saw the frozen rows
    free = tt_taps(model, inputs)["action_pred"][0].float()
    assert (chunk[FROZEN:] - free[FROZEN:]).abs().max() > 1e-3


def test_a_request_without_rtc_is_untouched_by_the_rtc_inputs(mock_device, case):
    """Zero mask: the RTC selects are exact no-ops, even with garbage in the path buffers."""
    version, checkpoint, ref, inputs, taps = case
    model = golden_model(checkpoint, ref)
    plain = tt_taps(model, inputs)
    garbage = tt_taps(model, inputs, mutate=lambda host: [host[k].fill_(123.0) for k in host
                                                          if k.startswith("rtc_point") or k == "rtc_target"])
    assert torch.equal(plain["action_pred"], garbage["action_pred"])
    assert max_abs_diff(plain["action_pred"].float().numpy(), taps["action_pred"].float().numpy()) < 1e-4


def test_dropping_the_mask_would_be_caught(mock_device, case):
    """The comparison has teeth: the same prefix with the device mask cleared is not the reference's inpaint."""
    version, checkpoint, ref, inputs, _ = case
    rtc = with_prefix(inputs, previous_chunk(ref, inputs)[:FROZEN])
    want = ref.infer(rtc)
    got = tt_taps(golden_model(checkpoint, ref), rtc, mutate=lambda host: host["rtc_mask"].zero_())
    diffs = step_diffs(got, want)
    assert diffs["velocity_0"] <= 1e-5  # step 0 starts from the noise either way
    assert diffs["velocity_1"] > 1e-3 and diffs["action_pred"] > 1e-3, diffs


class _GoldenTT:
    """A TT policy whose device is the golden execution: the version's TT policy class (host chain, finish,
    ``frozen_prefix``) around the golden model, run untraced."""

    @staticmethod
    def build(ref, model):
        from models.experimental.gr00t.common.versions import get_spec, load
        from models.experimental.gr00t.tt.runner import TTRunner

        cls = load(get_spec(ref.config.version).tt_policy_cls)

        def infer(self, inputs, clock=None):
            with self.model.execution():
                return cls.infer(self, inputs, None)  # no clock: its device syncs are real ttnn calls

        golden_cls = type(f"Golden{cls.__name__}", (cls,), {"infer": infer})
        stats = cls.load_stats(ref.checkpoint_dir, ref.layout, ref.config)  # as ``build`` reads them (N1.6: N16Host)
        return golden_cls(ref.config, cls.served_layout(ref.layout, stats), stats, model,
                          TTRunner(model, traced=False))


def test_a_ten_chunk_rollout_follows_the_reference(mock_device, case):
    """10 chunks, each after the first planned by the server's RTC code (``rtc_plan`` → ``attach_rtc``, the
    policy's own ``frozen_prefix``) from where the robot got to: the golden TT policy and the reference each
    follow their own previous chunk, and stay together (fp32 data flow, so within rounding)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[5] / "scripts" / "demo"))
    from models.experimental.gr00t.common.demo import load_demo_request
    from rtc_rollout import DEFAULTS, rollout

    version, checkpoint, ref, _, _ = case
    tt = _GoldenTT.build(ref, golden_model(checkpoint, ref))
    d = DEFAULTS[version]
    request = load_demo_request(version)
    runs = {name: rollout(policy, request, "inpaint", 10, d["execute"], d["delay"], d["control_hz"])
            for name, policy in (("reference", ref), ("tt", tt))}
    (want, plans), (got, tt_plans) = runs["reference"][:2], runs["tt"][:2]
    assert [p and p["frozen"] for p in plans] == [p and p["frozen"] for p in tt_plans]
    assert all(p["frozen"] > 0 for p in plans[1:]), plans
    worst = max(float(np.abs(g - w).max() / (np.abs(w).max() + 1e-12)) for g, w in zip(got, want))
    print(f"{version}: 10-chunk inpaint rollout, golden TT vs reference, max |d| / peak {worst:.1e}")
    assert worst < 1e-4
