# SPDX-License-Identifier: Apache-2.0
"""Each TT stage against its torch twin on the same weights and inputs (p150a only; skips otherwise).

Gates are the ones the published N1.5 package reports on the real checkpoint: the first SigLIP block
≥ 0.9999, SigLIP output ≥ 0.993, backbone features ≥ 0.995, VL self-attention output ≥ 0.991, and the
action chunk ≥ 0.9999 per arm group whose golden spread exceeds 0.2 (a near-constant group's PCC is
reported, not gated, as upstream does). On random synthetic weights the same gates apply; if a gate
fails there but holds on real weights, say so in the issue, not by loosening it here."""

from __future__ import annotations

import json
import os

import pytest
import torch

from models.experimental.gr00t.common.quality import TT_STAGE_PCC_GATES
from models.experimental.gr00t.tests.device_fixtures import (build_policy, gate_failures, group_report, observations,
                                                             tap_report)

GATES = TT_STAGE_PCC_GATES
# Reported for every module boundary without a published gate: projector, each DiT evaluation, state token.
REPORTED = ("vit_embeds", "state_features", "velocity_0", "velocity_1", "velocity_2", "velocity_3")


@pytest.fixture(scope="module")
def reference_taps(device_checkpoint):
    from models.experimental.gr00t.reference.torch_policy_n15 import ReferencePolicy

    ref = ReferencePolicy.from_checkpoint(device_checkpoint)
    obs, _, noise = observations(ref.layout)
    inputs = ref.prepare(obs, noise=noise)
    taps = ref.infer(inputs)
    vit = ref.model.backbone.eagle_model.vision_model.vision_model
    with torch.inference_mode():
        taps["vit_block_first"] = vit.encoder.layers[0](vit.embeddings(inputs.pixel_values))
    _, actions = ref.finish(taps["action_pred"], inputs)
    return {k: v.float() for k, v in taps.items() if isinstance(v, torch.Tensor)}, actions, inputs


def test_every_stage_meets_its_gate(p150, device_checkpoint, tt_cache_root, reference_taps, tmp_path):
    import ttnn

    taps_ref, actions_ref, inputs = reference_taps
    policy = build_policy(p150, device_checkpoint, tt_cache_root, traced=False)
    m = policy.model
    m.write_inputs(m.host_inputs(inputs.pixel_values, inputs.input_ids, inputs.state, inputs.noise))
    taps = {}
    m.forward(taps)
    got = {name: ttnn.to_torch(taps[name]).float() for name in (*GATES, *REPORTED)}
    report = tap_report(got, taps_ref, GATES, REPORTED, inputs.input_ids.shape[1])
    _, actions = policy.finish(got["action_pred"], inputs)
    groups = group_report(actions, actions_ref, policy.layout.action_keys)
    out = os.environ.get("GR00T_DEVICE_REPORT") or str(tmp_path / "pcc_stages.json")
    with open(out, "w") as f:
        json.dump({"stages": report, "groups": groups}, f, indent=1)
    print(json.dumps({"stages": report, "groups": groups}, indent=1))
    failed = gate_failures(report, groups, GATES["action_pred"])
    assert not failed, failed
