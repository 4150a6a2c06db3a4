# SPDX-License-Identifier: Apache-2.0
"""Device, weights and traces of the TT-NN port.

``open_model_device`` opens the p150a (a 1×1 mesh); ``upload`` moves the cached device-layout weights
into DRAM; ``TTRunner`` runs the four stages untraced, or captures each as a Metal trace once and
replays them, with the inputs uploaded on the same command queue (1 CQ) or on a second one (2 CQs).
The robot policy on top is ``ttnn_policy_n15.TTGr00tPolicy`` / ``ttnn_policy_n17.TTGr00tPolicyN17``
(over ``ttnn_policy.py``).

Two command queues. CQ 0 runs the stages; CQ 1 writes each request's inputs into the persistent input
buffers, stage by stage, so that the uploads of the later stages' inputs overlap the earlier stages. The
trace addresses are fixed, so the queues must be ordered by events. **The hazard rule**, for every input
buffer X (``model.STAGE_INPUTS`` says which stages read it):

1. a write of X on CQ 1 waits for the event CQ 0 recorded after the previous request's *last* stage
   that reads X (the write must not overwrite X under a replay that still reads it);
2. a stage on CQ 0 waits for the event CQ 1 recorded after the writes of every input that stage reads
   (the replay must not read X before this request's value has landed).

The trace-safety check (``tests/mock/test_trace_safety.py``) adds the third condition: no input buffer
shares DRAM with any stage intermediate, so CQ 1 can never write under a running stage's scratch space.
``tests/host/test_two_queues.py`` runs this protocol against a fake ttnn that schedules both queues
adversarially and fails on any hazard (``ttnn.wait_for_event`` crashes on the mock, so it cannot run there).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..common.errors import ConfigError
from ..common.timing import Stopwatch

L1_SMALL_SIZE = 32768
TRACE_REGION_SIZE = 200 * 2**20  # four stage traces; the published package's are well under this
NUM_CQS = (1, 2)
STAGES = ("vision", "llm", "adapter", "denoise")  # one trace each, replayed in this order


def device_present() -> bool:
    """A Tenstorrent card is visible to this process (the kernel driver's device nodes)."""
    return any(Path("/dev").glob("tenstorrent*"))


def check_num_cqs(num_cqs: int) -> int:
    if num_cqs not in NUM_CQS:
        raise ConfigError(f"GR00T_NUM_CQS={num_cqs}: expected one of {list(NUM_CQS)}")
    return num_cqs


def open_model_device(mesh_shape: tuple[int, int] = (1, 1), num_cqs: int = 1):
    """Open the p150a as a 1×1 mesh with room for the four traces and ``num_cqs`` command queues. Stage 1
    runs on one chip."""
    if tuple(mesh_shape) != (1, 1):
        raise ConfigError(f"TT_MESH_SHAPE={mesh_shape[0]}x{mesh_shape[1]}: the Stage-1 port runs on one p150a (1x1)")
    import ttnn  # the caller configures the (mock) runtime first

    return ttnn.open_mesh_device(ttnn.MeshShape(*mesh_shape), l1_small_size=L1_SMALL_SIZE,
                                 trace_region_size=TRACE_REGION_SIZE, num_command_queues=check_num_cqs(num_cqs))


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
    """Runs a ``TtGr00tN15`` / ``TtGr00tN17`` stage by stage: untraced, or replaying one Metal trace per
    stage; inputs on CQ 0 before the stages (``num_cqs=1``) or on CQ 1 under the hazard rule above."""

    def __init__(self, model, traced: bool, num_cqs: int = 1):
        self.model, self.traced, self.num_cqs = model, traced, check_num_cqs(num_cqs)
        self.traces: dict[str, object] = {}
        self.stage_done: dict[str, object] = {}  # stage → CQ 0 event recorded after its last run (2 CQs)
        # input → the last stage that reads it (rule 1 waits for that stage of the previous request)
        self.last_reader = {name: stage for stage in STAGES for name in model.STAGE_INPUTS[stage]}

    def capture(self) -> None:
        """Compile every stage with one untraced pass over the current inputs, then capture four traces."""
        import ttnn

        self.model.forward()
        ttnn.synchronize_device(self.model.device)
        for stage in STAGES:
            trace_id = ttnn.begin_trace_capture(self.model.device, cq_id=0)
            getattr(self.model, stage)()
            ttnn.end_trace_capture(self.model.device, trace_id, cq_id=0)
            self.traces[stage] = trace_id
        self.model.frozen = True
        ttnn.synchronize_device(self.model.device)

    def _stage(self, stage: str) -> None:
        import ttnn

        if self.traced:
            ttnn.execute_trace(self.model.device, self.traces[stage], cq_id=0, blocking=False)
        else:
            getattr(self.model, stage)()

    def run(self, host_inputs: dict, clock: Stopwatch | None = None) -> torch.Tensor:
        """Write the inputs, run the four stages (replay or untraced), read the float32 chunk [1, H, D]."""
        import ttnn

        m = self.model
        if self.traced and len(self.traces) != len(STAGES):
            raise RuntimeError("traced runner without captured traces: call capture() at warm-up first")
        if self.num_cqs == 1:
            m.write_inputs(host_inputs)
            if clock:
                ttnn.synchronize_device(m.device)
                clock.lap("upload")
        for stage in STAGES:
            if self.num_cqs == 2:
                for name in m.STAGE_INPUTS[stage]:
                    if name not in host_inputs:
                        continue
                    previous = self.stage_done.get(self.last_reader[name])
                    if previous is not None:
                        ttnn.wait_for_event(1, previous)  # rule 1: the last reader of X is done
                    ttnn.copy_host_to_device_tensor(host_inputs[name], m.inputs[name], cq_id=1)
                ttnn.wait_for_event(0, ttnn.record_event(m.device, 1))  # rule 2: this stage's inputs landed
            self._stage(stage)
            if self.num_cqs == 2:
                self.stage_done[stage] = ttnn.record_event(m.device, 0)
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
