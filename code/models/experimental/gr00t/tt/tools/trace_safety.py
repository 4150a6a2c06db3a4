# SPDX-License-Identifier: Apache-2.0
"""Trace-safety check of a TT model without capturing a trace (capture crashes on the mock P150).

A Metal trace records the device addresses its programs read and write; a replay reuses them blindly. So a
per-stage trace is safe only if, in the order ``TTRunner.capture`` runs (one untraced forward, then each
stage once, in ``STAGES`` order):

1. **no host I/O inside a stage**: no host tensor and no upload / readback / sync call in the stage's op
   graph (those happen outside the replays: the runner writes inputs before, reads actions after);
2. **no dangling read**: every device buffer a stage reads that it did not allocate itself (weights,
   constants, inputs, an earlier stage's output) is still allocated when the whole capture is over — a buffer
   freed later would be reused by the allocator and the replay would read whatever lands there;
3. **no overlap**: no buffer a stage allocates (its intermediates and outputs) shares a DRAM bank range with
   a buffer that must survive that stage's replay — the buffers of rule 2 and the persistent input buffers the
   host (or command queue 1) writes between and during replays;
4. **no allocation on the request path**: turning a request into host tensors and writing them into the
   persistent inputs allocates no device buffer (one would land on a freed intermediate and be clobbered).

``check`` replays that order on a (mock) device under ttnn's graph capture with fast runtime mode off (so
every buffer event is recorded) and returns the violations found; an empty report is the pass. The audit of
the N1.5 port (``../shared/spec/ttnn_audit.md`` §1.1) prototyped rules 1–3.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .census import capture_graph, device_ops
from ..runner import STAGES

HOST_IO_CALLS = ("ttnn.from_torch", "ttnn.to_torch", "ttnn.to_device", "ttnn.from_device",
                 "ttnn.copy_host_to_device_tensor", "ttnn.copy_device_to_host_tensor", "tt::tt_metal::copy_to_device",
                 "tt::tt_metal::copy_to_host", "Tensor::cpu", "Tensor::to_device", "ttnn.synchronize_device",
                 "ttnn::convert_python_tensor_to_tt_tensor")


@dataclass
class StageGraph:
    """What one stage did to device memory, from its captured graph: DRAM buffer events in order."""

    name: str
    calls: list[str]
    host_tensors: int  # tensor nodes in host storage
    events: list[tuple]  # ("alloc", address, bytes per bank) | ("free", address) | ("read", address)
    programs: int = 0  # device programs the stage enqueues (``program_execution`` nodes)
    ops: list = field(default_factory=list)  # its device operations (``census.DeviceOp``), in order

    @property
    def allocated(self) -> list[tuple[int, int]]:
        return [(e[1], e[2]) for e in self.events if e[0] == "alloc"]

    @property
    def read(self) -> set[int]:
        return {e[1] for e in self.events if e[0] == "read"}

    @property
    def peak_per_bank(self) -> int:
        """The most DRAM per bank the stage's own buffers held at once (its scratch and outputs; a buffer
        allocated before the stage and freed in it is not counted)."""
        live, size, peak = 0, {}, 0
        for e in self.events:
            if e[0] == "alloc":
                size[e[1]] = e[2]
                live += e[2]
                peak = max(peak, live)
            elif e[0] == "free" and e[1] in size:
                live -= size.pop(e[1])
        return peak


@dataclass
class Report:
    stages: dict[str, StageGraph] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def parse_graph(name: str, graph: list[dict]) -> StageGraph:
    calls, host, events, programs = [], 0, [], 0
    for node in graph:
        kind, p = node["node_type"], node.get("params", {})
        if kind == "program_execution":
            programs += 1
        elif kind == "function_start":
            calls.append(p["name"])
        elif kind == "tensor":
            if p.get("storage_type") == "HOST":
                host += 1
            elif "address" in p and int(p.get("buffer_type", 0)) == 0:  # DRAM
                events.append(("read", int(p["address"])))
        elif kind == "buffer_allocate" and p.get("type") == "DRAM":
            events.append(("alloc", int(p["address"]), int(p["max_size_per_bank"])))
        elif kind == "buffer_deallocate" and p.get("type") == "DRAM":
            events.append(("free", int(p["address"])))
    return StageGraph(name, calls, host, events, programs, device_ops(graph))


def captured(name: str, run) -> StageGraph:
    """``run()`` under ttnn's graph capture with fast runtime mode off (every buffer event recorded)."""
    import ttnn

    return parse_graph(name, capture_graph(run, ttnn.graph.RunMode.NORMAL))


def capture_stage(model, stage: str) -> StageGraph:
    return captured(stage, getattr(model, stage))


@dataclass(eq=False)
class _Buffer:
    address: int
    per_bank: int | None  # None: allocated before the capture began (weights, constants, inputs)
    stage: str | None  # the stage that allocated it
    freed_at: int | None = None  # index in the whole event stream


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def analyse(stages: list[StageGraph], inputs: dict[str, tuple[int, int]], write_path: StageGraph) -> Report:
    """Rules 1–4 over stage graphs in capture order; ``inputs``: name → (address, bytes per bank)."""
    report = Report({s.name: s for s in stages})
    v = report.violations
    for s in stages:
        io = sorted({c for c in s.calls if c in HOST_IO_CALLS})
        if io or s.host_tensors:
            v.append(f"{s.name}: host I/O inside the stage ({io}, {s.host_tensors} host tensors)")
    # one pass over the capture's buffer events, resolving every read to the buffer live at that address then
    current: dict[int, _Buffer] = {}
    reads: dict[str, set[_Buffer]] = {s.name: set() for s in stages}
    made: dict[str, list[_Buffer]] = {s.name: [] for s in stages}
    step = 0
    for s in stages:
        for event in s.events:
            step += 1
            if event[0] == "alloc":
                current[event[1]] = b = _Buffer(event[1], event[2], s.name)
                made[s.name].append(b)
            elif event[0] == "free":
                b = current.pop(event[1], None) or _Buffer(event[1], None, None)
                b.freed_at = step
            else:
                reads[s.name].add(current.setdefault(event[1], _Buffer(event[1], None, None)))
    for s in stages:
        outside = [b for b in reads[s.name] if b.stage != s.name]
        dangling = sorted(b.address for b in outside if b.freed_at is not None)
        if dangling:
            v.append(f"{s.name}: reads {len(dangling)} buffer(s) allocated outside it that the capture later frees "
                     f"(first at {dangling[0]:#x})")
        survivors = list(inputs.items())
        survivors += [(f"{b.stage} output", (b.address, b.per_bank)) for b in outside if b.per_bank is not None]
        for mine in made[s.name]:
            for what, rng in survivors:
                if _overlaps((mine.address, mine.per_bank), rng):
                    v.append(f"{s.name}: a buffer at {mine.address:#x} overlaps {what} at {rng[0]:#x}, which must "
                             "survive its replay")
    if write_path.allocated:
        v.append(f"request path: writing the inputs allocates {len(write_path.allocated)} device buffer(s)")
    return report


def check(model, host_inputs: dict, capture_order: tuple[str, ...] = STAGES) -> Report:
    """Write ``host_inputs``, run the untraced forward, then each stage in ``capture_order`` under graph
    capture, as ``TTRunner.capture`` does; the report of rules 1–4."""
    write_path = captured("write_inputs", lambda: model.write_inputs(host_inputs))
    model.forward()
    stages = [capture_stage(model, stage) for stage in capture_order]
    inputs = {name: (t.buffer_address(), _bytes_per_bank(t, model.device)) for name, t in model.inputs.items()}
    return analyse(stages, inputs, write_path)


def _bytes_per_bank(t, device) -> int:
    """An interleaved DRAM buffer's footprint in each bank, as the allocator reports it for a twin of ``t``."""
    import ttnn

    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    twin = ttnn.allocate_tensor_on_device(t.shape, t.dtype, t.layout, device, ttnn.DRAM_MEMORY_CONFIG)
    graph = parse_graph("twin", ttnn.graph.end_graph_capture())
    ttnn.deallocate(twin)
    (_, per_bank), = graph.allocated
    return per_bank
