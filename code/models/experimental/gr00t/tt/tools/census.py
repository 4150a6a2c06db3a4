# SPDX-License-Identifier: Apache-2.0
"""What each stage asks of a p150a, read from a ``ttnn.graph`` capture of it: the device operations with their
program factories, the bytes they move and the FLOPs they compute, and the floor those imply.

Every device operation of a capture is a ``function_start`` node that carries ``program_factory_type``; its
``input_tensors`` and the matching ``function_end``'s connections are its input and output tensor nodes
(shape, dtype, layout). From those:

- **bytes**: every input read once and every output written once, at its stored size (tiles padded to 32×32;
  bfloat8_b is 1088 bytes a tile). Every buffer of the port is DRAM-interleaved, so each byte is a DRAM byte.
- **FLOPs**: 2·M·K·N for a matmul (the output's elements × 2K), 4·b·h·Sq·Sk·d for SDPA, one per output element
  for everything else.
- **L1 per core** of an op (``l1_per_op``, from a ``RunMode.NO_DISPATCH`` capture): the circular or dataflow
  buffers its program allocates, summed as if on one core (a worst case); ttnn's own
  ``extract_resource_usage_per_core`` gives the stage's peak, against the 1,572,864 B of L1 a Blackhole core has
  (the mock refuses a circular buffer beyond it).
- **floor** of an op: the larger of bytes ÷ DRAM bandwidth and FLOPs ÷ the grid's peak at the op's math
  fidelity; a stage's floor is the sum over its ops (they run one after another). These are lower bounds
  from the card's published figures, **not** measurements or estimates of what the port achieves: they ignore
  dispatch, NoC traffic, DRAM efficiency and the op's own program config.

Card figures (Tenstorrent's Blackhole specifications and Hot Chips 2024 material): 512 GB/s GDDR6;
745 TFLOPS "FP8" for 140 Tensix cores (372 TFLOPS "FP16"), scaled here to the 13×10 worker grid the mock P150
exposes (130 cores). The "FP8" figure is the matrix engine's one-pass rate, i.e. LoFi: tt-metal's
``tech_reports/matrix_engine/matrix_engine.md`` gives 4 TFLOPS per engine at 1 GHz for LoFi, 2 / 1.33 / 1 for
HiFi2 / HiFi3 / HiFi4 (its 8×16 × 16×16 multiply per cycle: 140 cores × 4096 FLOP × ~1.3 GHz ≈ 745 TFLOPS), so
the published "FP16" figure is the two-pass HiFi2 rate. Math fidelity LoFi / HiFi2 / HiFi3 / HiFi4 takes
1 / 2 / 3 / 4 passes, so the peak divides by that. (Until 2026-12 this module took the 372 TFLOPS "FP16" figure
as the LoFi peak, which doubled every compute floor.)
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

DRAM_BYTES_PER_S = 512e9
GRID_CORES = 13 * 10
PEAK_FLOPS = 745e12 * GRID_CORES / 140  # LoFi (one pass), the whole worker grid
FIDELITY_PASSES = {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4}
L1_BYTES_PER_CORE = 1_572_864
L1_HEADROOM = 0.8  # the budget: no op's buffers above 80 % of a core's L1
# The generic multi-core matmul: no data reuse and no multicast. Every matmul of the port must avoid it.
GENERIC_MATMUL_FACTORY = "MatmulMultiCoreProgramFactory"

_TILE_BYTES = {"BFLOAT16": 2048, "BFLOAT8_B": 1088, "BFLOAT4_B": 576, "FLOAT32": 4096, "UINT32": 4096,
               "INT32": 4096, "UINT16": 2048, "UINT8": 1024}
_ELEMENT_BYTES = {"BFLOAT16": 2, "FLOAT32": 4, "UINT32": 4, "INT32": 4, "UINT16": 2, "UINT8": 1}
_FIDELITY = re.compile(r"math_fidelity=(\w+)")


@dataclass(frozen=True)
class Tensor:
    shape: tuple[int, ...]
    dtype: str  # "BFLOAT16", "BFLOAT8_B", ...
    tiled: bool

    @property
    def bytes(self) -> int:
        if not self.shape:
            return 0
        if self.tiled:
            *lead, h, w = (1, *self.shape) if len(self.shape) == 1 else self.shape
            return math.prod(lead) * math.ceil(h / 32) * math.ceil(w / 32) * _TILE_BYTES[self.dtype]
        return math.prod(self.shape) * _ELEMENT_BYTES.get(self.dtype, 2)


@dataclass(frozen=True)
class DeviceOp:
    name: str  # the device operation, e.g. "MatmulDeviceOperation"
    factory: str  # its program factory, without the namespace
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    fidelity: str | None  # the compute config's math fidelity, where the op has one

    @property
    def bytes(self) -> int:
        if self.name.startswith("Embedding"):  # a lookup reads the rows it writes, not the whole table
            return self.inputs[0].bytes + 2 * sum(t.bytes for t in self.outputs)
        return sum(t.bytes for t in self.inputs + self.outputs)

    @property
    def flops(self) -> float:
        out = self.outputs[0].shape if self.outputs else ()
        if self.name.startswith("Matmul") and len(self.inputs) >= 2:
            return 2.0 * math.prod(out) * self.inputs[0].shape[-1]
        if self.name.startswith("SDPA") and len(self.inputs) >= 2:
            b, h, sq, d = self.inputs[0].shape
            return 4.0 * b * h * sq * self.inputs[1].shape[-2] * d
        return float(math.prod(out)) if out else 0.0

    @property
    def floor_s(self) -> float:
        peak = PEAK_FLOPS / FIDELITY_PASSES.get(self.fidelity or "LoFi", 1)
        return max(self.bytes / DRAM_BYTES_PER_S, self.flops / peak)


def _tensor(node: dict) -> Tensor:
    p = node["params"]
    shape = tuple(int(v) for v in re.findall(r"-?\d+", p.get("shape", "")))
    return Tensor(shape, p.get("dtype", "").replace("DataType::", ""), p.get("layout") == "Layout::TILE")


def device_ops(graph: list[dict]) -> list[DeviceOp]:
    """Every device operation of a captured graph, in order."""
    ops = []
    for node in graph:
        p = node.get("params", {})
        if node["node_type"] != "function_start" or "program_factory_type" not in p:
            continue
        name = p["name"]
        end = next((graph[j] for j in node["connections"] if graph[j]["node_type"] == "function_end"
                    and graph[j]["params"].get("name") == name), None)
        outputs = tuple(_tensor(graph[j]) for j in (end["connections"] if end else [])
                        if graph[j]["node_type"] == "tensor")
        fidelity = _FIDELITY.search(node["arguments"][0]) if node.get("arguments") else None
        ops.append(DeviceOp(name, p["program_factory_type"].split("::")[-1],
                            tuple(_tensor(graph[j]) for j in node["input_tensors"]), outputs,
                            fidelity.group(1) if fidelity else None))
    return ops


def census(ops: list[DeviceOp]) -> dict:
    """Programs per device operation and the matmul program factories chosen, for the budgets."""
    return {"ops": dict(Counter(op.name for op in ops).most_common()),
            "matmul_factories": dict(Counter(op.factory for op in ops if op.name.startswith("Matmul")).most_common())}


def generic_matmuls(ops: list[DeviceOp]) -> list[DeviceOp]:
    return [op for op in ops if op.name.startswith("Matmul") and op.factory == GENERIC_MATMUL_FACTORY]


def roofline(ops: list[DeviceOp]) -> dict:
    """One stage's sheet: totals, the floor, and the same per device operation, largest floor first."""
    by_op: dict[str, dict] = {}
    for op in ops:
        row = by_op.setdefault(op.name, {"programs": 0, "bytes": 0, "flops": 0.0, "floor_us": 0.0})
        row["programs"] += 1
        row["bytes"] += op.bytes
        row["flops"] += op.flops
        row["floor_us"] += op.floor_s * 1e6
    total_bytes, total_flops = sum(op.bytes for op in ops), sum(op.flops for op in ops)
    return {"programs": len(ops), "bytes": total_bytes, "flops": total_flops,
            "floor_us": round(sum(op.floor_s for op in ops) * 1e6, 1),
            "memory_floor_us": round(total_bytes / DRAM_BYTES_PER_S * 1e6, 1),
            "compute_floor_us": round(sum(op.flops / (PEAK_FLOPS / FIDELITY_PASSES.get(op.fidelity or "LoFi", 1))
                                          for op in ops) * 1e6, 1),
            "by_op": {k: {**v, "floor_us": round(v["floor_us"], 1)}
                      for k, v in sorted(by_op.items(), key=lambda kv: -kv[1]["floor_us"])}}


def l1_per_op(graph: list[dict]) -> list[tuple[str, int]]:
    """(device operation, bytes of L1 per core) for every device operation of a ``NO_DISPATCH`` capture."""
    out, cb, dfb, name = [], 0, 0, None
    for node in graph:
        kind, p = node["node_type"], node.get("params", {})
        if kind == "function_start" and "program_factory_type" in p:
            if name is not None:
                out.append((name, max(cb, dfb)))
            name, cb, dfb = p["name"], 0, 0
        elif name is not None and kind == "circular_buffer_allocate":
            cb += int(p["size"])
        elif name is not None and kind == "dataflow_buffer_allocate":
            dfb += int(p["size"])
    if name is not None:
        out.append((name, max(cb, dfb)))
    return out


@dataclass
class StageL1:
    peak_per_core: int  # ttnn's worst-case peak over the stage (``peak_total``)
    per_op: list[tuple[str, int]]

    @property
    def top(self) -> tuple[str, int]:
        return max(self.per_op, key=lambda r: r[1]) if self.per_op else ("", 0)


def capture_graph(run, mode):
    """``run()`` under ttnn's graph capture in ``mode`` (a ``ttnn.graph.RunMode``), fast runtime mode off so that
    every operation and buffer event is recorded: the captured graph."""
    import ttnn

    with ttnn.manage_config("enable_fast_runtime_mode", False):
        ttnn.graph.begin_graph_capture(mode)
        try:
            run()
        finally:
            graph = ttnn.graph.end_graph_capture()
    return graph


def stage_l1(run) -> StageL1:
    """``run()`` (one stage, whose inputs are on the device) under a ``NO_DISPATCH`` capture: its L1 use."""
    import ttnn

    graph = capture_graph(run, ttnn.graph.RunMode.NO_DISPATCH)
    return StageL1(int(ttnn.graph.extract_resource_usage_per_core(graph).peak_total), l1_per_op(graph))
