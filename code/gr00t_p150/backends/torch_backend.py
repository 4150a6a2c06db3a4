# SPDX-License-Identifier: Apache-2.0
"""PyTorch backend: the fp32 reference policy (the golden) or the fast path, on the CPU or a CUDA device.

``GR00T_TORCH_PATH`` picks the path: ``fast`` (``torch_fast/``: hoisted step-invariant
work; on CUDA also static shapes, fused projections and per-stage CUDA graphs), ``reference``, or
``auto`` = fast on CUDA or in bf16, else the fp32 reference. ``GR00T_TORCH_DTYPE`` picks the precision:
``bfloat16`` is the fast path's mixed precision (bf16 GEMMs; ``torch_fast/fast_cuda.py`` lists what stays fp32),
on CUDA or on a CPU; ``float32`` runs anywhere; ``auto`` takes bf16 on a CPU with native bf16 matrix
instructions (AMX-BF16 or AVX512-BF16, as torch's cpuinfo reports them: oneDNN's bf16 kernels use them), fp32
on any other CPU (where bf16 GEMMs are emulated and slower) and on CUDA. The fp32 fast path shares the
reference's parameter tensors, so the reference stays available (``reference_policy``) without a second copy.
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


def cpu_bf16_units() -> list[str]:
    """The native bf16 matrix instructions of this CPU that oneDNN's bf16 kernels use, as torch's cpuinfo sees
    them: ``AMX-BF16`` (Intel Sapphire Rapids and later), ``AVX512-BF16`` (Intel Cooper Lake and later, AMD Zen 4
    and later); empty on CPUs without them (AMD Zen 3, older Intel), where bf16 GEMMs are converted to fp32."""
    import torch

    units = []
    if torch.cpu._is_amx_tile_supported():
        units.append("AMX-BF16")
    if torch.cpu._is_avx512_bf16_supported():
        units.append("AVX512-BF16")
    return units


def resolve_torch_dtype(requested: str, device: str, path: str = "auto", units: list[str] | None = None
                        ) -> tuple[str, str]:
    """(dtype, reason) for GR00T_TORCH_DTYPE=auto|float32|bfloat16 on ``device`` with GR00T_TORCH_PATH=``path``;
    ``units`` overrides the CPU's detected bf16 instructions (tests)."""
    if requested != "auto":
        return requested, f"GR00T_TORCH_DTYPE={requested}"
    if path == "reference":
        return "float32", "auto: GR00T_TORCH_PATH=reference is the fp32 golden"
    if device != "cpu":
        return "float32", "auto: fp32 on CUDA (GR00T_TORCH_DTYPE=bfloat16 selects the bf16 fast path)"
    units = cpu_bf16_units() if units is None else units
    if units:
        return "bfloat16", f"auto: this CPU has native bf16 matrix instructions ({', '.join(units)})"
    return "float32", "auto: this CPU has no native bf16 matrix instructions (AMX-BF16, AVX512-BF16); bf16 is slower"


def resolve_torch_path(requested: str, device: str, dtype: str) -> tuple[str, str]:
    """(path, reason) for GR00T_TORCH_PATH=auto|fast|reference on ``device`` with ``dtype``."""
    if requested == "reference" and dtype != "float32":
        raise RuntimeError("GR00T_TORCH_PATH=reference is the fp32 golden: it needs GR00T_TORCH_DTYPE=float32")
    if requested != "auto":
        return requested, f"GR00T_TORCH_PATH={requested}"
    if device == "cuda":
        return "fast", "auto: fast path on CUDA"
    if dtype != "float32":
        return "fast", "auto: bf16 runs on the fast path"
    return "reference", "auto: the CPU serves the fp32 reference (the golden)"


DTYPE_WORDS = {"float32": "fp32", "bfloat16": "bf16"}


class TorchBackend(PolicyBackend):
    name = "torch"
    mock = False

    def __init__(self, checkpoint: Path, version: str, layout: str, device: str, dtype: str, reason: str,
                 path: str = "auto", dtype_reason: str | None = None):
        import torch
        from models.experimental.gr00t.reference.policies import load_reference_policy
        from models.experimental.gr00t.torch_fast.build import fast_policy_from_reference, load_mixed_fast_policy

        if dtype_reason is None:  # a caller that resolved ``auto`` itself passes why
            dtype, dtype_reason = resolve_torch_dtype(dtype, device, path)
        self.dtype_reason = dtype_reason
        self.path, path_reason = resolve_torch_path(path, device, dtype)
        self.device, self.dtype, self.selection = device, dtype, reason
        self.reason = f"{reason}; {path_reason}"
        if dtype != "float32":  # bf16: its bf16 parts straight from the checkpoint, never the model in fp32
            self.policy, self.reference_policy = load_mixed_fast_policy(checkpoint, version, layout, device=device,
                                                                        dtype=dtype), None
        else:
            ref = load_reference_policy(checkpoint, version, layout, device)
            # the fp32 fast path computes with the reference's own tensors: the golden costs no memory
            self.policy = ref if self.path == "reference" else fast_policy_from_reference(ref, device=device)
            self.reference_policy = ref
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
        return self.policy.chunk_shape

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
        d = {"name": "torch", "device": self.device, "dtype": self.dtype, "dtype_reason": self.dtype_reason,
             "path": self.path, "reason": self.reason,
             "cpu_threads": self.threads, "is_fp32_reference": self.is_reference}
        if self.path == "fast":
            d["fast_path"] = self.policy.options()
        return d
