# SPDX-License-Identifier: Apache-2.0
"""Each N1.7 TT stage against the fp32 reference on the same weights and inputs (p150a only; skips otherwise).

Gates are the ones the published N1.7 package's card quotes for boundaries this port exposes
(``common.quality.TT_STAGE_PCC_GATES_N17``): the first DeepStack merger ≥ 0.9998, the first LLM layer ≥ 0.991,
and every action group whose golden spread exceeds 0.2 ≥ 0.9998 (a near-constant group, such as the gripper,
is reported, not gated). Every other stage boundary is reported. The published figures (tightest tap 0.999849
on its tuned tower; 62.8 ms) are the package's, on its own port, never this port's. CI runs the same
comparison on the golden model (``tests/mock/test_tt_model_n17.py``)."""

from __future__ import annotations

import json
import os

import pytest

from models.experimental.gr00t.common.quality import TT_STAGE_PCC_GATES_N17
from models.experimental.gr00t.tests.device_fixtures import (N17_REPORTED, build_policy, gate_failures, group_report,
                                                             observations, reference_taps_n17, tap_report)


@pytest.fixture(scope="module")
def reference(device_checkpoint_n17):
    from models.experimental.gr00t.reference.torch_policy_n17 import ReferencePolicyN17

    ref = ReferencePolicyN17.from_checkpoint(device_checkpoint_n17)
    obs, _, noise = observations(ref.layout)
    inputs = ref.prepare(obs, noise=noise)
    taps = reference_taps_n17(ref, inputs)
    _, actions = ref.finish(taps["action_pred"], inputs)
    return taps, actions, inputs


def test_every_n17_stage_meets_its_gate(p150, device_checkpoint_n17, tt_cache_root, reference, tmp_path):
    import ttnn

    want, actions_ref, inputs = reference
    policy = build_policy(p150, device_checkpoint_n17, tt_cache_root, traced=False, version="n17")
    m = policy.model
    m.write_inputs(m.host_inputs_for(inputs))
    taps = {}
    m.forward(taps)
    got = {k: ttnn.to_torch(v).float() for k, v in taps.items()}
    report = tap_report(got, want, TT_STAGE_PCC_GATES_N17, N17_REPORTED, inputs.input_ids.shape[1])
    _, actions = policy.finish(got["action_pred"], inputs)
    groups = group_report(actions, actions_ref, policy.layout.action_keys)
    out = os.environ.get("GR00T_DEVICE_REPORT") or str(tmp_path / "pcc_stages_n17.json")
    with open(out, "w") as f:
        json.dump({"stages": report, "groups": groups}, f, indent=1)
    print(json.dumps({"stages": report, "groups": groups}, indent=1))
    failed = gate_failures(report, groups, TT_STAGE_PCC_GATES_N17["action_pred"])
    assert not failed, failed
