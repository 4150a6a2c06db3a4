# SPDX-License-Identifier: Apache-2.0
"""PyTorch backend: the fp32 reference policy (the golden) or the fast path, on the CPU or a CUDA device.

``GR00T_TORCH_PATH`` picks the path: ``fast`` (``torch_fast/``: hoisted step-invariant
work; on CUDA also static shapes, fused projections and per-stage CUDA graphs), ``reference``, or
``auto`` = fast on CUDA, reference on the CPU. ``GR00T_TORCH_DTYPE=bfloat16`` is the CUDA fast path's
mixed precision; fp32 runs anywhere. The fp32 fast path shares the reference's parameter tensors, so
the reference stays available (``reference_policy``) without a second copy of the weights.
"""

from __future__ import annotations

from pathlib import Path

from .base import PolicyBackend


def pick_torch_device(requested: str) -> tuple[str, str]:
    """(device, reason) for GR00T_TORCH_DEVICE=auto|cpu|cuda."""
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("GR00T_TORCH_DEVICE=cuda but torch sees no CUDA device")
    if requested != "auto":
        return requested, f"GR00T_TORCH_DEVICE={requested}"
    if torch.cuda.is_available():
        return "cuda", f"auto: CUDA device {torch.cuda.get_device_name(0)!r} present"
    return "cpu", "auto: no CUDA device"


def resolve_torch_path(requested: str, device: str, dtype: str) -> tuple[str, str]:
    """(path, reason) for GR00T_TORCH_PATH=auto|fast|reference on ``device`` with ``dtype``."""
    if dtype == "bfloat16" and device != "cuda":
        raise RuntimeError("GR00T_TORCH_DTYPE=bfloat16 runs on CUDA only (on the CPU use float32)")
    if requested == "reference" and dtype != "float32":
        raise RuntimeError("GR00T_TORCH_PATH=reference is the fp32 golden: it needs GR00T_TORCH_DTYPE=float32")
    if requested != "auto":
        return requested, f"GR00T_TORCH_PATH={requested}"
    if device == "cuda" or dtype != "float32":
        return "fast", "auto: fast path on CUDA"
    return "reference", "auto: the CPU serves the fp32 reference (the golden)"


DTYPE_WORDS = {"float32": "fp32", "bfloat16": "bf16"}


class TorchBackend(PolicyBackend):
    name = "torch"
    mock = False

    def __init__(self, checkpoint: Path, version: str, layout: str, device: str, dtype: str, reason: str,
                 path: str = "auto"):
        import torch
        from models.experimental.gr00t.reference.policies import load_reference_policy
        from models.experimental.gr00t.torch_fast.build import fast_policy_from_reference

        self.path, path_reason = resolve_torch_path(path, device, dtype)
        self.device, self.dtype, self.selection = device, dtype, reason
        self.reason = f"{reason}; {path_reason}"
        ref = load_reference_policy(checkpoint, version, layout, device if dtype == "float32" else "cpu")
        if self.path == "reference":
            self.policy = self.reference_policy = ref
        else:
            self.policy = fast_policy_from_reference(ref, device=device, dtype=dtype)
            # fp32: the same tensors, so the golden costs no memory; bf16 consumed ref's tensors
            self.reference_policy = ref if dtype == "float32" else None
        self.threads = torch.get_num_threads()
        # Both paths take stacked requests; with static shapes (CUDA) the fast path runs them in batch buckets.
        self.batchable = None
        # guided RTC needs autograd through the DiT: the reference's; the fast path's stages (and graphs) inpaint
        self.rtc_variants = ("inpaint", "guided") if self.path == "reference" else ("inpaint",)

    def batch_buckets(self, max_batch: int) -> list[int] | None:
        """The static batch sizes a server batching up to ``max_batch`` runs at (powers of two, each with its own
        buffers and CUDA graphs), or None where any size runs as it is (the reference, the unpadded fast path)."""
        from models.experimental.gr00t.torch_fast.fast_policy import batch_bucket

        if self.path != "fast" or not self.policy.pad:
            return None
        return [1 << i for i in range(batch_bucket(max_batch).bit_length())]

    @property
    def action_shape(self) -> tuple[int, int]:
        h = self.policy.config.action_head
        return h.action_horizon, h.action_dim

    @property
    def is_reference(self) -> bool:
        """True when this backend is the fp32 CPU golden itself."""
        return self.device == "cpu" and self.dtype == "float32" and self.path == "reference"

    @property
    def stage(self) -> str:
        return f"{self.path}-{DTYPE_WORDS[self.dtype]}-{self.device}"

    def close(self) -> None:
        """Drop the weights (and, on CUDA, the graphs and cached blocks they held)."""
        import torch

        self.policy = self.reference_policy = None
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def describe(self) -> dict:
        d = {"name": "torch", "device": self.device, "dtype": self.dtype, "path": self.path, "reason": self.reason,
             "cpu_threads": self.threads, "is_fp32_reference": self.is_reference}
        if self.path == "fast":
            d["fast_path"] = self.policy.options()
        return d
