# SPDX-License-Identifier: Apache-2.0
"""Checkpoint → TT-NN device-layout weights, converted once on the host and cached on disk.

The one door every TT module's weights go through: the tensors of the version's ``device_tensors``
(``VersionSpec.tt_device_tensors``: ``weight_layout_n15.py`` for N1.5, ``weight_layout_n17.py`` for N1.7, over the
shared rules of ``weight_layout.py``: transposed, fused and tile-padded; see there), converted to ttnn host tensors
in the dtypes the ``TTPolicy`` says. No device is needed (tiling needs only the cluster description, which a mock
provides).

The cache lives under ``GR00T_TT_CACHE`` in a folder named by the version and keyed by (weights id,
policy, layout, ttnn version, converter version): a second boot with the same key reads only ``.tensorbin`` files.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..common.checkpoint import LazyCheckpoint
from ..common.layouts import Layout
from ..common.versions import get_spec, load
from .policy import TTPolicy

CONVERTER_VERSION = 3  # bump when a conversion rule changes: old caches are then ignored
MANIFEST = "manifest.json"


def device_tensors_for(version: str) -> Callable:
    """The version's ``device_tensors(load, names, config, layout)`` (``VersionSpec.tt_device_tensors``)."""
    return load(get_spec(version).tt_device_tensors)


@dataclass(frozen=True)
class CacheInfo:
    path: Path
    converted: bool  # False: everything was already in the cache
    tensors: int
    nbytes: int
    seconds: float


def cache_key(weights_id: str, policy: TTPolicy, layout: Layout) -> str:
    ttnn_version = importlib.metadata.version("ttnn")
    text = f"{weights_id}|{policy.dtype_policy}|{layout.name}|ttnn-{ttnn_version}|converter-{CONVERTER_VERSION}"
    if layout.image_grids is not None:  # N1.6: the weights (resized position rows, category rows) follow the files
        text += f"|grids-{list(layout.image_grids)}|category-{layout.embodiment_id}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _file(name: str) -> str:
    return name + ".tensorbin"


def convert_checkpoint(checkpoint_dir: str | Path, cache_root: str | Path, *, weights_id: str, policy: TTPolicy,
                       layout: Layout, log: Callable[[str], None] = print) -> CacheInfo:
    """Convert every used tensor of the checkpoint into ``cache_root/<key>/`` (or reuse it)."""
    import ttnn  # the caller configures the (mock) runtime first

    path = Path(cache_root) / f"{layout.version}-{cache_key(weights_id, policy, layout)}"
    manifest_path = path / MANIFEST
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        if all((path / _file(n)).is_file() for n in manifest["tensors"]):
            log(f"TT weight cache hit: {path} ({len(manifest['tensors'])} tensors, {manifest['nbytes'] / 1e9:.2f} GB)")
            return CacheInfo(path, False, len(manifest["tensors"]), manifest["nbytes"], 0.0)
    ckpt = LazyCheckpoint(checkpoint_dir)
    config = load(get_spec(layout.version).config_cls).from_checkpoint(checkpoint_dir)
    path.mkdir(parents=True, exist_ok=True)
    t0, nbytes, entries = time.perf_counter(), 0, {}
    log(f"Converting {len(ckpt.names)} checkpoint tensors to TT-NN layout ({policy.dtype_policy}) into {path}")
    rules = device_tensors_for(layout.version)
    converted = rules(lambda n: ckpt.load(n, torch.float32), list(ckpt.names), config, layout)
    for i, (name, tensor, tt_layout) in enumerate(converted):
        dtype = policy.weight_dtype(name)
        host = ttnn.from_torch(tensor, dtype=getattr(ttnn, dtype),
                               layout=ttnn.TILE_LAYOUT if tt_layout == "tile" else ttnn.ROW_MAJOR_LAYOUT)
        ttnn.dump_tensor(str(path / _file(name)), host)
        nbytes += (path / _file(name)).stat().st_size
        entries[name] = {"dtype": dtype, "layout": tt_layout, "shape": list(tensor.shape)}
        if (i + 1) % 100 == 0:
            log(f"  {i + 1} tensors, {nbytes / 1e9:.2f} GB, {time.perf_counter() - t0:.1f} s")
    seconds = time.perf_counter() - t0
    manifest_path.write_text(json.dumps({"weights_id": weights_id, "policy": policy.to_dict(), "layout": layout.name,
                                         "nbytes": nbytes, "seconds": round(seconds, 2), "tensors": entries}, indent=1))
    log(f"TT weight cache written: {len(entries)} tensors, {nbytes / 1e9:.2f} GB in {seconds:.1f} s")
    return CacheInfo(path, True, len(entries), nbytes, seconds)


def load_cached(info: CacheInfo) -> dict:
    """name → ttnn host tensor, read back from the cache."""
    import ttnn

    names = json.loads((info.path / MANIFEST).read_text())["tensors"]
    return {name: ttnn.load_tensor(str(info.path / _file(name))) for name in names}
