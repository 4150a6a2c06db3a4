# SPDX-License-Identifier: Apache-2.0
"""Device, weights and traces of the TT-NN port.

``open_model_device`` opens the p150a (a 1×1 mesh); ``upload`` moves the cached device-layout weights
into DRAM; ``TTRunner`` runs the four stages untraced, or captures each as a Metal trace once and
replays them. The robot policy on top is ``ttnn_policy.TTGr00tPolicy``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..common.errors import ConfigError
from ..common.timing import Stopwatch

L1_SMALL_SIZE = 32768
TRACE_REGION_SIZE = 200 * 2**20  # four stage traces; the published package's are well under this


def device_present() -> bool:
    """A Tenstorrent card is visible to this process (the kernel driver's device nodes)."""
    return any(Path("/dev").glob("tenstorrent*"))


def open_model_device(mesh_shape: tuple[int, int] = (1, 1)):
    """Open the p150a as a 1×1 mesh with room for the four traces. Stage 1 runs on one chip."""
    if tuple(mesh_shape) != (1, 1):
        raise ConfigError(f"TT_MESH_SHAPE={mesh_shape[0]}x{mesh_shape[1]}: the Stage-1 port runs on one p150a (1x1)")
    import ttnn  # the caller configures the (mock) runtime first

    return ttnn.open_mesh_device(ttnn.MeshShape(*mesh_shape), l1_small_size=L1_SMALL_SIZE,
                                 trace_region_size=TRACE_REGION_SIZE)


def close_model_device(device) -> None:
    import ttnn

    ttnn.close_mesh_device(device)


def upload(device, host_tensors: dict):
    """Cached host tensors → ``DeviceWeights`` in DRAM."""
    import ttnn

    from .ttnn_common import DeviceWeights

    return DeviceWeights(device, {name: ttnn.to_device(t, device, memory_config=ttnn.DRAM_MEMORY_CONFIG)
                                  for name, t in host_tensors.items()})


class TTRunner:
    """Runs a ``TtGr00tN15`` stage by stage: untraced, or replaying one Metal trace per stage."""

    def __init__(self, model, traced: bool):
        self.model, self.traced = model, traced
        self.traces: dict[str, object] = {}

    def capture(self) -> None:
        """Compile every stage with one untraced pass over the current inputs, then capture four traces."""
        import ttnn

        from .ttnn_gr00t_n15 import STAGES

        self.model.forward()
        ttnn.synchronize_device(self.model.device)
        for stage in STAGES:
            trace_id = ttnn.begin_trace_capture(self.model.device, cq_id=0)
            getattr(self.model, stage)()
            ttnn.end_trace_capture(self.model.device, trace_id, cq_id=0)
            self.traces[stage] = trace_id
        self.model.frozen = True
        ttnn.synchronize_device(self.model.device)

    def run(self, host_inputs: dict, clock: Stopwatch | None = None) -> torch.Tensor:
        """Write the inputs, run the four stages (replay or untraced), read the float32 chunk [1, H, D]."""
        import ttnn

        from .ttnn_gr00t_n15 import STAGES

        m = self.model
        if self.traced and len(self.traces) != len(STAGES):
            raise RuntimeError("traced runner without captured traces: call capture() at warm-up first")
        m.write_inputs(host_inputs)
        if clock:
            ttnn.synchronize_device(m.device)
            clock.lap("upload")
        for stage in STAGES:
            if self.traced:
                ttnn.execute_trace(m.device, self.traces[stage], cq_id=0, blocking=False)
            else:
                getattr(m, stage)()
            if clock:
                ttnn.synchronize_device(m.device)
                clock.lap(stage)
        actions = m.read_actions()
        if clock:
            clock.lap("readback")
        return actions

    def release(self) -> None:
        import ttnn

        for trace_id in self.traces.values():
            ttnn.release_trace(self.model.device, trace_id)
        self.traces.clear()
