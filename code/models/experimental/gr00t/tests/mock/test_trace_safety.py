# SPDX-License-Identifier: Apache-2.0
"""Trace safety of every version's TT model on the mock P150 (``tt/tools/trace_safety.py``): in ``TTRunner.capture``'s
order, no stage does host I/O, no stage reads a buffer that is freed later, no stage allocates over a buffer that must
survive its replay (inputs, constants, weights, earlier outputs), and the request path allocates nothing.
Negative controls show each rule can fail: capturing llm before vision leaves a dangling read, a readback
inside a stage is host I/O, and an upload that allocates is caught."""

from __future__ import annotations

import pytest

from models.experimental.gr00t.common.observation import parse_observation
from models.experimental.gr00t.common.versions import SPECS

pytestmark = pytest.mark.mock


def build(version: str, checkpoint, device, cache):
    from models.experimental.gr00t.common.demo import load_demo_request
    from models.experimental.gr00t.common.versions import get_spec, load

    policy = load(get_spec(version).tt_policy_cls).build(checkpoint, device, cache_root=cache,
                                                        weights_id=f"{version}-tiny", traced=False, num_cqs=1,
                                                        log=lambda _: None)
    request = load_demo_request(version)
    inputs = policy.prepare(parse_observation(request, policy.layout), noise=request["noise"])
    return policy.model, policy.model.host_inputs_for(inputs)


TT_VERSIONS = sorted(v for v, spec in SPECS.items() if spec.ttnn)


@pytest.fixture(scope="module")
def models(mock_device, tiny_checkpoints, tmp_path_factory):
    """Every TT version's model, built through its TT policy (N1.6: the checkpoint's grids, ``served_layout``)."""
    cache = tmp_path_factory.mktemp("tt-cache-safety")
    return {v: build(v, tiny_checkpoints[v], mock_device, cache) for v in TT_VERSIONS}


@pytest.mark.parametrize("version", TT_VERSIONS)
def test_every_stage_is_trace_safe(models, version):
    from models.experimental.gr00t.tt.runner import STAGES
    from models.experimental.gr00t.tt.tools.trace_safety import check

    model, host = models[version]
    report = check(model, host)
    summary = {s: (len(g.calls), len(g.allocated), len(g.read)) for s, g in report.stages.items()}
    print(f"trace safety {version}: (calls, buffers allocated, buffers read) per stage {summary}")
    assert report.ok, report.violations
    assert list(report.stages) == list(STAGES)
    inputs = {t.buffer_address() for t in model.inputs.values()}
    read = set().union(*(g.read for g in report.stages.values()))
    assert inputs <= read  # the check saw every persistent input being read
    assert all(len(g.allocated) > 0 for g in report.stages.values())


def test_capturing_llm_before_vision_leaves_a_dangling_read(models):
    from models.experimental.gr00t.tt.tools.trace_safety import check

    model, host = models["n17"]
    report = check(model, host, capture_order=("llm", "vision", "adapter", "denoise"))
    assert any(v.startswith("llm: reads") and "frees" in v for v in report.violations), report.violations


def test_a_readback_inside_a_stage_is_host_io(models, monkeypatch):
    import ttnn

    from models.experimental.gr00t.tt.tools.trace_safety import check

    model, host = models["n15"]
    adapter = type(model).adapter

    def peeking_adapter(self, taps=None):
        adapter(self, taps)
        ttnn.to_torch(self.outputs["vl_embs"])

    monkeypatch.setattr(type(model), "adapter", peeking_adapter)
    report = check(model, host)
    assert any(v.startswith("adapter: host I/O") for v in report.violations), report.violations


def test_an_upload_that_allocates_is_caught(models, monkeypatch):
    import ttnn

    from models.experimental.gr00t.tt.tools.trace_safety import check

    model, host = models["n15"]

    def allocating_write(self, tensors, cq_id=0):
        self.inputs["state"] = ttnn.to_device(tensors["state"], self.device, memory_config=ttnn.DRAM_MEMORY_CONFIG)

    monkeypatch.setattr(type(model), "write_inputs", allocating_write)
    saved = dict(model.inputs)
    try:
        report = check(model, host)
    finally:
        model.inputs.update(saved)
    assert any(v.startswith("request path") for v in report.violations), report.violations
