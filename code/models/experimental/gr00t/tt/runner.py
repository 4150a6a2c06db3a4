# SPDX-License-Identifier: Apache-2.0
"""Device, weights and traces of the TT-NN port, and the host-side policy around them.

``open_model_device`` opens the p150a (a 1×1 mesh); ``upload`` moves the cached device-layout weights
into DRAM; ``TTRunner`` runs the four stages untraced, or captures each as a Metal trace once and
replays them; ``TTGr00tPolicy`` is the N1.5 GR1 policy on top (same host pre/post-processing as the
fp32 reference, so only the model differs).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..common.configs import Gr00tN15Config
from ..common.errors import ConfigError
from ..common.layouts import Layout, get_layout
from ..common.normalization import ActionStats, unnormalize
from ..common.observation import Observation
from ..common.prompts import encode_n15_prompt
from ..reference.torch_policy import PreparedInputs, Stopwatch, prepare_n15
from .policy import TTPolicy

L1_SMALL_SIZE = 32768
TRACE_REGION_SIZE = 200 * 2**20  # four stage traces; the published package's are well under this


def device_present() -> bool:
    """A Tenstorrent card is visible to this process (the kernel driver's device nodes)."""
    return any(Path("/dev").glob("tenstorrent*"))


def is_mock() -> bool:
    """ttnn was pointed at a mock cluster description (no card: ops are validated, not executed)."""
    return bool(os.environ.get("TT_METAL_MOCK_CLUSTER_DESC_PATH"))


def open_model_device(mesh_shape: tuple[int, int] = (1, 1)):
    """Open the p150a as a 1×1 mesh with room for the four traces. Stage 1 runs on one chip."""
    if tuple(mesh_shape) != (1, 1):
        raise ConfigError(f"TT_MESH_SHAPE={mesh_shape[0]}x{mesh_shape[1]}: the Stage-1 port runs on one p150a (1x1)")
    import ttnn  # noqa: PLC0415 - the caller configures the (mock) runtime first

    return ttnn.open_mesh_device(ttnn.MeshShape(*mesh_shape), l1_small_size=L1_SMALL_SIZE,
                                 trace_region_size=TRACE_REGION_SIZE)


def close_model_device(device) -> None:
    import ttnn  # noqa: PLC0415

    ttnn.close_mesh_device(device)


def upload(device, host_tensors: dict):
    """Cached host tensors → ``DeviceWeights`` in DRAM."""
    import ttnn  # noqa: PLC0415

    from .ttnn_common import DeviceWeights  # noqa: PLC0415

    return DeviceWeights(device, {name: ttnn.to_device(t, device, memory_config=ttnn.DRAM_MEMORY_CONFIG)
                                  for name, t in host_tensors.items()})


class TTRunner:
    """Runs a ``Gr00tTT`` stage by stage: untraced, or replaying one Metal trace per stage."""

    def __init__(self, model, traced: bool):
        self.model, self.traced = model, traced
        self.traces: dict[str, object] = {}

    def capture(self) -> None:
        """Compile every stage with one untraced pass over the current inputs, then capture four traces."""
        import ttnn  # noqa: PLC0415

        from .ttnn_gr00t import STAGES  # noqa: PLC0415

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
        import ttnn  # noqa: PLC0415

        from .ttnn_gr00t import STAGES  # noqa: PLC0415

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
        import ttnn  # noqa: PLC0415

        for trace_id in self.traces.values():
            ttnn.release_trace(self.model.device, trace_id)
        self.traces.clear()


@dataclass
class TTGr00tPolicy:
    """GR00T N1.5 GR1 on TT-NN: the reference's host chain around the device model."""

    config: Gr00tN15Config
    layout: Layout
    stats: ActionStats
    model: object  # Gr00tTT
    runner: TTRunner

    @classmethod
    def build(cls, checkpoint_dir: str | Path, device, *, cache_root: str | Path, weights_id: str,
              policy: TTPolicy = TTPolicy(), layout: str = "gr1", traced: bool = True,
              log: Callable[[str], None] = print) -> "TTGr00tPolicy":
        from .ttnn_gr00t import Gr00tTT, StaticShapes  # noqa: PLC0415
        from .weight_cache import convert_checkpoint, load_cached  # noqa: PLC0415

        checkpoint_dir = Path(checkpoint_dir)
        config = Gr00tN15Config.from_checkpoint(checkpoint_dir)
        lay = get_layout(layout)
        stats = ActionStats.from_metadata(checkpoint_dir, lay)
        info = convert_checkpoint(checkpoint_dir, cache_root, weights_id=weights_id, policy=policy, layout=lay, log=log)
        t0 = time.perf_counter()
        weights = upload(device, load_cached(info))
        log(f"TT weights on the device: {info.tensors} tensors, {info.nbytes / 1e9:.2f} GB in "
            f"{time.perf_counter() - t0:.1f} s")
        offset = image_offset(config, lay)
        model = Gr00tTT(weights, config, StaticShapes.gr1(config, offset))
        return cls(config, lay, stats, model, TTRunner(model, traced))

    def prepare(self, obs: Observation, *, noise=None, seed: int | None = None,
                state_dtype: str = "float64") -> PreparedInputs:
        """The reference's input chain; raises ``InputError`` before any device work."""
        return prepare_n15(self.config, self.layout, obs, noise=noise, seed=seed, state_dtype=state_dtype)

    def infer(self, inputs: PreparedInputs, clock: Stopwatch | None = None) -> torch.Tensor:
        host = self.model.host_inputs(inputs.pixel_values, inputs.input_ids, inputs.state, inputs.noise)
        if clock:
            clock.lap("host_inputs")
        return self.runner.run(host, clock)

    def finish(self, action_pred: torch.Tensor) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        chunk = action_pred[0].float().cpu().numpy()
        return chunk, unnormalize(chunk, self.stats, self.layout)


def image_offset(config: Gr00tN15Config, layout: Layout) -> int:
    """Where the image block starts in every prompt of this layout (the chat prefix is fixed)."""
    ids = encode_n15_prompt("x", n_images=layout.n_images, tokens_per_image=config.eagle.tokens_per_image,
                            max_text_tokens=layout.max_text_tokens).input_ids
    return ids.index(config.eagle.image_token_index)
