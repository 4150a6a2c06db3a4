# SPDX-License-Identifier: Apache-2.0
"""Pick the reference policy from what a checkpoint says it is (``config.json`` ``model_type``)."""

from __future__ import annotations

import json
from pathlib import Path

from ..common.errors import ConfigError
from ..common.versions import get_spec, load, spec_for_model_type


def checkpoint_version(directory: str | Path) -> str:
    path = Path(directory) / "config.json"
    try:
        model_type = json.loads(path.read_text()).get("model_type")
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not found or not JSON ({exc.__class__.__name__})") from None
    return spec_for_model_type(model_type, path).name


def load_reference_policy(directory: str | Path, version: str | None = None, layout: str | None = None,
                          device: str = "cpu"):
    """The fp32 reference policy for the checkpoint in ``directory``; ``version`` must match it if given."""
    found = checkpoint_version(directory)
    if version is not None and version != found:
        raise ConfigError(f"{directory}: holds a {found} checkpoint, but {version} was requested")
    spec = get_spec(found)
    return load(spec.policy_cls).from_checkpoint(directory, layout=layout or spec.layout, device=device)


def fast_policy_from_reference(ref, *, device: str = "cpu", dtype: str = "float32", pad: bool | None = None,
                               fuse: bool | None = None, graphs: bool | None = None):
    """The fast path built on ``ref`` (a reference policy loaded fp32 on the CPU, or on ``device``).

    fp32: the fast policy computes with ``ref``'s own tensors, and ``ref`` stays a working golden.
    bf16 (CUDA): ``ref``'s tensors are cast and moved in place (one copy of the weights), so ``ref``
    must not be used afterwards. Defaults: CUDA pads, fuses and captures graphs; the CPU does none
    of it (measured no faster there; see ``fast_policy``)."""
    import torch

    from .fast_cuda import to_mixed_precision
    from .fast_dit import StepTables

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
    return cls(model, ref.config, ref.layout, ref.stats, ref.checkpoint_dir, ref.synthetic,
               tables=tables.to(dev), **options)
