# SPDX-License-Identifier: Apache-2.0
"""The roofline arithmetic of ``tt/tools/census.py`` on hand-made graph nodes: stored tensor sizes (tile padding,
bfloat8_b's shared exponents), FLOPs of a matmul and an SDPA, the floor at a math fidelity, and the parse of a
device operation's inputs, outputs, factory and fidelity from ``ttnn.graph`` capture nodes."""

from __future__ import annotations

import pytest

from models.experimental.gr00t.tt.tools import census
from models.experimental.gr00t.tt.tools.census import DeviceOp, Tensor


def test_stored_sizes_pad_to_tiles_and_count_bfloat8_b_exponents():
    assert Tensor((64, 1536), "BFLOAT16", True).bytes == 2 * 48 * 2048 == 64 * 1536 * 2
    assert Tensor((1, 16, 1536), "BFLOAT16", True).bytes == 1 * 48 * 2048  # 16 rows still fill one tile row
    assert Tensor((1536, 6144), "BFLOAT8_B", True).bytes == 48 * 192 * 1088  # 1 byte a value + 64 exponent bytes
    assert Tensor((2, 3, 40, 132), "FLOAT32", True).bytes == 6 * 2 * 5 * 4096
    assert Tensor((1, 384), "UINT32", False).bytes == 384 * 4  # row-major: no padding
    assert Tensor((), "BFLOAT16", True).bytes == 0


def test_matmul_and_sdpa_flops_and_the_floor_at_a_fidelity():
    x, w, y = Tensor((1, 64, 1536), "BFLOAT16", True), Tensor((1536, 6144), "BFLOAT8_B", True), \
        Tensor((1, 64, 6144), "BFLOAT16", True)
    mm = DeviceOp("MatmulDeviceOperation", "MatmulMultiCoreReuseMcast1DProgramFactory", (x, w), (y,), "HiFi2")
    assert mm.flops == 2 * 64 * 1536 * 6144
    assert mm.bytes == x.bytes + w.bytes + y.bytes
    # DRAM-bound: 10.4 MB at 512 GB/s is ~20 us; 1.2 GFLOP at (745 T · 130/140) / 2 is ~3.5 us
    assert mm.floor_s == pytest.approx(mm.bytes / 512e9)
    lofi = DeviceOp(mm.name, mm.factory, mm.inputs, mm.outputs, "LoFi")
    assert mm.flops / (census.PEAK_FLOPS / 2) == pytest.approx(2 * lofi.flops / census.PEAK_FLOPS)
    q, k = Tensor((1, 16, 384, 128), "BFLOAT16", True), Tensor((1, 8, 384, 128), "BFLOAT16", True)
    sdpa = DeviceOp("SDPAOperation", "SDPAProgramFactory", (q, k, k), (q,), "HiFi4")
    assert sdpa.flops == 4 * 16 * 384 * 384 * 128
    big = DeviceOp("MatmulDeviceOperation", "f", (Tensor((1, 4096, 4096), "BFLOAT16", True),) * 2,
                   (Tensor((1, 4096, 4096), "BFLOAT16", True),), "HiFi4")
    assert big.floor_s == pytest.approx(big.flops / (census.PEAK_FLOPS / 4))  # compute-bound at HiFi4
    hifi3 = DeviceOp(big.name, big.factory, big.inputs, big.outputs, "HiFi3")
    assert hifi3.floor_s == pytest.approx(big.flops / (census.PEAK_FLOPS / 3))
    # the one-pass (LoFi) rate is the published 745 TFLOPS "FP8" for 140 cores; its "FP16" 372 is HiFi2's
    assert census.PEAK_FLOPS == pytest.approx(745e12 * 130 / 140)


def _node(kind, **params):
    return {"node_type": kind, "params": params, "connections": [], "input_tensors": [], "arguments": []}


def test_device_ops_are_parsed_from_capture_nodes():
    graph = [_node("capture_start"),
             _node("tensor", shape="Shape([1, 64, 1536])", dtype="DataType::BFLOAT16", layout="Layout::TILE"),
             _node("tensor", shape="Shape([1536, 6144])", dtype="DataType::BFLOAT8_B", layout="Layout::TILE"),
             {**_node("function_start", name="MatmulDeviceOperation",
                      program_factory_type="ttnn::prim::MatmulMultiCoreReuseMcast1DProgramFactory"),
              "input_tensors": [1, 2], "connections": [4, 5],
              "arguments": ["MatmulParams(<variant>, ComputeKernelConfig(math_fidelity=HiFi2,math_approx_mode=1))"]},
             _node("program_execution"),
             {**_node("function_end", name="MatmulDeviceOperation"), "connections": [6]},
             _node("tensor", shape="Shape([1, 64, 6144])", dtype="DataType::BFLOAT16", layout="Layout::TILE"),
             _node("function_start", name="ttnn.linear")]  # a Python-level call: not a device operation
    (op,) = census.device_ops(graph)
    assert op.factory == "MatmulMultiCoreReuseMcast1DProgramFactory" and op.fidelity == "HiFi2"
    assert op.inputs == (Tensor((1, 64, 1536), "BFLOAT16", True), Tensor((1536, 6144), "BFLOAT8_B", True))
    assert op.outputs == (Tensor((1, 64, 6144), "BFLOAT16", True),)
    assert census.census([op]) == {"ops": {"MatmulDeviceOperation": 1},
                                   "matmul_factories": {"MatmulMultiCoreReuseMcast1DProgramFactory": 1}}
    generic = DeviceOp(op.name, census.GENERIC_MATMUL_FACTORY, op.inputs, op.outputs, None)
    assert census.generic_matmuls([op, generic]) == [generic]
    sheet = census.roofline([op, op])
    assert sheet["programs"] == 2 and sheet["bytes"] == 2 * op.bytes
    assert sheet["floor_us"] == pytest.approx(2 * op.floor_s * 1e6, abs=0.1)


def test_l1_per_op_sums_each_program_s_buffers():
    graph = [_node("function_start", name="LayerNormDeviceOperation", program_factory_type="x"),
             _node("circular_buffer_allocate", size=4096), _node("dataflow_buffer_allocate", size=8192),
             _node("dataflow_buffer_allocate", size=8192),
             _node("function_start", name="MatmulDeviceOperation", program_factory_type="y"),
             _node("circular_buffer_allocate", size=32768)]
    assert census.l1_per_op(graph) == [("LayerNormDeviceOperation", 16384), ("MatmulDeviceOperation", 32768)]


def test_the_committed_roofline_sheets_cover_every_stage_with_a_floor():
    import json
    from pathlib import Path

    from models.experimental.gr00t.tests.perf.test_e2e_latency import over_floor, stage_floors_ms

    results = Path(__file__).resolve().parents[6] / "benchmarks" / "results"
    for version in ("n15", "n17"):
        sheet = json.loads((results / f"tt_roofline_{version}.json").read_text())
        assert sheet["trace_safe"] and "not measurements" in sheet["what"]
        floors = stage_floors_ms(version)
        assert list(floors) == ["vision", "llm", "adapter", "denoise"] and all(f > 0.5 for f in floors.values())
        assert over_floor({s: 2.9 * f for s, f in floors.items()}, floors) == {}
        assert list(over_floor({**floors, "denoise": 3.1 * floors["denoise"]}, floors)) == ["denoise"]
