# SPDX-License-Identifier: Apache-2.0
"""The TT modules' data flow against the fp32 reference, without a card: the unchanged TT module code
runs on the host with every ttnn op replaced by ttnn's own golden function (``tt/tools/golden_ops.py``).

In fp32 the port must reproduce the reference (itself tested against transformers / diffusers) at
every stage boundary: fused and head-padded weights, head splits, GQA, RoPE, the splice, padded
sequences and their masks, the hoisted cross-attention K/V, the action-row slice and the Euler update.
In "device" precision (weights rounded by ttnn's host conversion, bf16 activations) the result is an
estimate of on-device accuracy, not a measurement."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.experimental.gr00t.common.quality import max_abs_diff, pcc

from .tt_expect import golden_taps, reference_case, tap_pairs

pytestmark = pytest.mark.mock

TAPS = ("vision_features", "vit_embeds", "backbone_features", "vl_embs", "state_features",
        "velocity_0", "velocity_1", "velocity_2", "velocity_3", "action_pred")


@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    return reference_case("n15", tiny_checkpoint)


def compare(tt: dict, taps: dict, seq_len: int) -> dict[str, tuple[float, float]]:
    return {name: (max_abs_diff(got.numpy(), want.numpy()), pcc(got.flatten().numpy(), want.flatten().numpy()))
            for name, (got, want) in tap_pairs(tt, taps, TAPS, seq_len).items()}


def test_the_tt_data_flow_equals_the_fp32_reference(mock_device, tiny_checkpoint, reference):
    ref, inputs, taps = reference
    assert inputs.input_ids.shape[1] < 384  # the padding and its masks are exercised
    diffs = compare(golden_taps(tiny_checkpoint, ref, inputs, "fp32"), taps, inputs.input_ids.shape[1])
    print("golden TT data flow vs fp32 reference, max |d| per tap:",
          ", ".join(f"{name} {d:.1e}" for name, (d, _) in diffs.items()))
    worst = {name: d for name, (d, _) in diffs.items() if not d < 1e-4}
    assert not worst, worst


def test_unmasked_padding_would_be_caught(mock_device, tiny_checkpoint, reference):
    """The comparison has teeth: letting the adapter attend to the padded prompt rows breaks it."""
    ref, inputs, taps = reference
    tt = golden_taps(tiny_checkpoint, ref, inputs, "fp32", mutate=lambda host: host["vl_mask"].zero_())
    diffs = compare(tt, taps, inputs.input_ids.shape[1])
    assert diffs["backbone_features"][0] < 1e-4  # before the mask matters
    assert diffs["vl_embs"][0] > 1e-2 and diffs["action_pred"][0] > 1e-3


def test_device_precision_estimate_stays_close(mock_device, tiny_checkpoint, reference):
    ref, inputs, taps = reference
    tt = golden_taps(tiny_checkpoint, ref, inputs, "device")
    diffs = compare(tt, taps, inputs.input_ids.shape[1])
    d, p = diffs["action_pred"]
    assert p > 0.9995 and 0 < d < 0.2, diffs["action_pred"]  # rounded, so not exact, but close
    chunk = tt["action_pred"][0].float().numpy()
    assert np.isfinite(chunk).all()
    assert torch.count_nonzero(tt["action_pred"]) > 0


def test_the_hifi2_model_truncates_activations_of_bfloat8_matmuls_only(mock_device):
    """``device_hifi2`` clears the last bf16 mantissa bit of a matmul's activation when its weight is bfloat8_b
    (HiFi2), towards zero, and leaves bf16-weight matmuls as ``device`` computes them."""
    from models.experimental.gr00t.tt.tools.golden_ops import golden_execution, truncate_last_bf16_bit

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=g).bfloat16().float()
    t = truncate_last_bf16_bit(x)
    changed = (t != x).float().mean().item()
    assert (t.abs() <= x.abs()).all() and 0.3 < changed < 0.7  # about every other value has that bit set
    assert torch.equal(t.bfloat16().float(), t)  # still a bf16 value
    assert ((t.view(torch.int32) ^ x.view(torch.int32)) & ~(1 << 16)).count_nonzero() == 0  # only that bit moved
    w = torch.randn(256, 128, generator=g) / 16
    out = {}
    for precision in ("device", "device_hifi2"):
        with golden_execution(precision) as shim:
            xs = shim.from_torch(x[None])
            out[precision] = {dtype: shim.linear(xs, shim.from_torch(w, dtype=getattr(shim, dtype)))
                              for dtype in ("bfloat8_b", "bfloat16")}
    assert torch.equal(out["device"]["bfloat16"], out["device_hifi2"]["bfloat16"])
    assert not torch.equal(out["device"]["bfloat8_b"], out["device_hifi2"]["bfloat8_b"])


def test_a_step_size_the_dt_fold_would_round_is_refused(tiny_checkpoint, reference):
    """The TT action head folds dt into the decoder's last layer, exact only for a power-of-two dt: 3 Euler steps
    (dt = 1/3) is refused with a ConfigError that names the setting, never built with rounded weights."""
    import dataclasses

    from models.experimental.gr00t.common.checkpoint import LazyCheckpoint
    from models.experimental.gr00t.common.errors import ConfigError
    from models.experimental.gr00t.tt.tools.golden_ops import golden_tt_model

    ref, _, _ = reference
    head = dataclasses.replace(ref.config.action_head, num_inference_timesteps=3)
    config = dataclasses.replace(ref.config, action_head=head)
    with pytest.raises(ConfigError, match="num_inference_timesteps = 3 .* not a power of two"):
        golden_tt_model(LazyCheckpoint(tiny_checkpoint), config, ref.layout)
    assert golden_tt_model(LazyCheckpoint(tiny_checkpoint), dataclasses.replace(
        ref.config, action_head=dataclasses.replace(head, num_inference_timesteps=8)), ref.layout) is not None
