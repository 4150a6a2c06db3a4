# SPDX-License-Identifier: Apache-2.0
"""Build the torch fast path of whichever version ``ref`` is, on the CPU or a CUDA device, fp32 or bf16."""

from __future__ import annotations

import torch

from ..common.versions import get_spec, load
from .fast_cuda import mixed_precision_dtypes, to_mixed_precision
from .fast_dit import StepTables


def load_mixed_fast_policy(checkpoint, version: str | None = None, layout: str | None = None, *,
                           device: str = "cpu", dtype: str = "bfloat16", **options):
    """The bf16 fast path as the server's torch backend loads it: its bf16 parts straight from the checkpoint
    (``mixed_precision_dtypes``), never the whole model in fp32 on the host; the same tensors, bit for bit, as
    ``fast_policy_from_reference`` over a fp32 load. ``options``: ``pad`` / ``fuse`` / ``graphs``."""
    from ..reference.policies import load_reference_policy

    ref = load_reference_policy(checkpoint, version, layout, "cpu",
                                dtypes_of=mixed_precision_dtypes(getattr(torch, dtype)))
    return fast_policy_from_reference(ref, device=device, dtype=dtype, **options)


def fast_policy_from_reference(ref, *, device: str = "cpu", dtype: str = "float32", pad: bool | None = None,
                               fuse: bool | None = None, graphs: bool | None = None):
    """The fast path built on ``ref`` (a reference policy loaded fp32 on the CPU, or on ``device``).

    fp32: the fast policy computes with ``ref``'s own tensors, and ``ref`` stays a working golden.
    bf16 (CUDA): ``ref``'s tensors are cast and moved in place (one copy of the weights), so ``ref``
    must not be used afterwards. Defaults: CUDA pads, fuses and captures graphs; the CPU does none
    of it (measured no faster there; see ``fast_policy``)."""
    cls = load(get_spec(ref.config.version).fast_cls)
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    options = {"pad": cuda if pad is None else pad, "fuse": cuda if fuse is None else fuse,
               "graphs": cuda if graphs is None else graphs}
    if dtype == "float32":
        if ref.device != dev:
            ref.model.to(dev)
            ref = type(ref)(ref.model, ref.config, ref.layout, ref.stats, ref.checkpoint_dir, ref.synthetic)
        return cls.from_reference(ref, **options)
    if dtype != "bfloat16":
        raise ValueError(f"dtype {dtype!r}: the fast path runs float32 or bfloat16")
    tables = StepTables.build(ref.model.action_head)  # from the fp32 weights, before the cast
    model = to_mixed_precision(ref.model, dev, torch.bfloat16)
    cast = type(ref)(model, ref.config, ref.layout, ref.stats, ref.checkpoint_dir, ref.synthetic)
    return cls(cast, tables=tables.to(dev), **options)
