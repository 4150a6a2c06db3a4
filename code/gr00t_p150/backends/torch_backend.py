# SPDX-License-Identifier: Apache-2.0
"""PyTorch backend: the fp32 reference policy on the CPU (the golden) or on a CUDA device."""

from __future__ import annotations

import time
from pathlib import Path

from .base import BackendResult


def pick_torch_device(requested: str) -> tuple[str, str]:
    """(device, reason) for GR00T_TORCH_DEVICE=auto|cpu|cuda."""
    import torch  # noqa: PLC0415

    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("GR00T_TORCH_DEVICE=cuda but torch sees no CUDA device")
    if requested != "auto":
        return requested, f"GR00T_TORCH_DEVICE={requested}"
    if torch.cuda.is_available():
        return "cuda", f"auto: CUDA device {torch.cuda.get_device_name(0)!r} present"
    return "cpu", "auto: no CUDA device"


class TorchBackend:
    name = "torch"

    def __init__(self, checkpoint: Path, version: str, layout: str, device: str, dtype: str, reason: str):
        import torch  # noqa: PLC0415

        from models.experimental.gr00t.reference.policies import load_reference_policy  # noqa: PLC0415

        self.device, self.dtype, self.reason = device, dtype, reason
        self.policy = load_reference_policy(checkpoint, version, layout, device)
        self.threads = torch.get_num_threads()

    @property
    def action_shape(self) -> tuple[int, int]:
        h = self.policy.config.action_head
        return h.action_horizon, h.action_dim

    @property
    def is_reference(self) -> bool:
        """True when this backend is the fp32 CPU golden itself."""
        return self.device == "cpu" and self.dtype == "float32"

    def predict(self, observation, *, noise=None, seed=None, state_dtype="float64") -> BackendResult:
        from models.experimental.gr00t.reference.torch_policy import Stopwatch  # noqa: PLC0415

        t0 = time.perf_counter()
        inputs = self.policy.prepare(observation, noise=noise, seed=seed, state_dtype=state_dtype)
        encode = (time.perf_counter() - t0) * 1e3
        clock = Stopwatch()
        taps = self.policy.infer(inputs, clock)
        device_ms = sum(clock.ms.values())
        t1 = time.perf_counter()
        action_pred, actions = self.policy.finish(taps["action_pred"], inputs)
        timing = {"encode": encode, "device": device_ms, "decode_actions": (time.perf_counter() - t1) * 1e3,
                  **{f"device.{k}": v for k, v in clock.ms.items()}}
        return BackendResult(action_pred, actions, int(inputs.input_ids.shape[1]), inputs.prompt_tokens,
                             inputs.noise_source, inputs.seed, timing)

    def describe(self) -> dict:
        return {"name": "torch", "device": self.device, "dtype": self.dtype, "reason": self.reason,
                "cpu_threads": self.threads, "is_fp32_reference": self.is_reference}
