# SPDX-License-Identifier: Apache-2.0
"""The per-stage sheet of a full-size TT model on the (mock) device: program census, matmul factories, bytes,
FLOPs and floors (``census.py``), L1 per core, and the trace-safety report, from one pass over the stages in
``TTRunner.capture``'s order. ``code/scripts/bench/tt_roofline.py`` writes it to ``benchmarks/results``;
``make test-tt-full`` asserts its budgets."""

from __future__ import annotations

import torch

from ...common.versions import get_spec, load
from ..runner import STAGES
from . import census
from .trace_safety import Report, check


def allocated_model(version: str, device, batch: int = 1):
    """(model, config, layout): the full-size TT model of ``version`` for ``batch`` requests per call over device
    weights of the real converted shapes and dtypes (the checkpoint inventory through the version's
    ``device_tensors`` and the default dtype policy), allocated uninitialised in their cached layouts: for the mock,
    where values never matter."""
    import ttnn

    from ...common.layouts import DEFAULT_LAYOUT, get_layout
    from ...common.weights import inventory
    from ..policy import TTPolicy
    from ..ttnn_common import DeviceWeights
    from ..ttnn_policy import build_tt_model
    from ..weight_cache import device_tensors_for

    config, layout, policy = load(get_spec(version).config_cls).full(), get_layout(DEFAULT_LAYOUT[version]), TTPolicy()
    shapes = {s.name: s.shape for s in inventory(config)}
    tensors = {}
    for name, t, kind in device_tensors_for(version)(lambda n: torch.zeros(shapes[n]), list(shapes), config, layout):
        tensors[name] = ttnn.allocate_tensor_on_device(
            ttnn.Shape(list(t.shape)), getattr(ttnn, policy.weight_dtype(name)),
            ttnn.TILE_LAYOUT if kind == "tile" else ttnn.ROW_MAJOR_LAYOUT, device, ttnn.DRAM_MEMORY_CONFIG)
    return build_tt_model(DeviceWeights(device, tensors, policy), config, layout, batch), config, layout


def dram_in_use(device) -> int:
    """Bytes of DRAM allocated on ``device`` now, over every bank (the allocator's own view; the mock keeps one)."""
    import ttnn

    view = ttnn.get_memory_view(device, ttnn.BufferType.DRAM)
    return int(view.total_bytes_allocated_per_bank) * int(view.num_banks)


def demo_host_inputs(model, config, layout, instruction: str = "put the marker in the bowl") -> dict:
    """A request's host tensors at the model's static shapes: zero pixels, state and noise, a real prompt (the
    version's ``VersionSpec.tt_blank_inputs``)."""
    return load(get_spec(layout.version).tt_blank_inputs)(model, config, layout, instruction)


def stage_sheet(model, host: dict) -> tuple[dict, Report]:
    """({stage: census, roofline and L1}, the trace-safety report) of one request through ``model``."""
    report = check(model, host)
    sheet = {}
    for stage in STAGES:  # the check left every stage's inputs and outputs in place
        g, l1 = report.stages[stage], census.stage_l1(getattr(model, stage))
        top, top_bytes = l1.top
        sheet[stage] = {**census.census(g.ops), **census.roofline(g.ops),
                        "generic_matmuls": len(census.generic_matmuls(g.ops)),
                        "dram_peak_per_bank": g.peak_per_bank,
                        "l1_peak_per_core": l1.peak_per_core, "l1_top_op": top, "l1_top_op_bytes": top_bytes}
    return sheet, report


def over_l1(sheet: dict) -> dict[str, int]:
    """stage → its L1 peak per core, for every stage above ``census.L1_HEADROOM`` of a core's L1."""
    limit = census.L1_HEADROOM * census.L1_BYTES_PER_CORE
    return {s: row["l1_peak_per_core"] for s, row in sheet.items() if row["l1_peak_per_core"] > limit}
