# SPDX-License-Identifier: Apache-2.0
"""Synthetic checkpoints in exactly the real snapshot's format, with deterministic random weights.

A directory written here has what the real snapshot has: ``config.json``, sharded
``model-0000k-of-0000n.safetensors`` with the real tensor names and stored dtypes, the index, and the
normalisation files (N1.5: ``experiment_cfg/metadata.json`` with GR1 statistics and modalities; N1.7:
``statistics.json``, ``processor_config.json``, ``embodiment_id.json`` for DROID; N1.6: the same three files for
``gr1``, ``unitree_g1`` and ``oxe_widowx``). A ``SYNTHETIC.json`` marker says the weights are random, so nothing
downstream can present them as a policy.

Every tensor is drawn from its own generator seeded by (seed, name), so a tensor's values do not
depend on which other tensors exist or on shard boundaries.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from .checkpoint import INDEX_FILE
from .configs_n16 import PROCESSOR_CLASS as N16_PROCESSOR_CLASS
from .configs_n16 import Gr00tN16ProcessorConfig
from .embodiments_n16 import EMBODIMENT_IDS as N16_EMBODIMENT_IDS
from .embodiments_n16 import EMBODIMENTS as N16_EMBODIMENTS
from .embodiments_n16 import N16Embodiment
from .layouts import DROID, GR1, Layout
from .versions import SPECS, load
from .weights import TensorSpec

SYNTHETIC_MARKER = "SYNTHETIC.json"
METADATA_FILE = "experiment_cfg/metadata.json"
DEFAULT_SHARD_BYTES = {"tiny": 16 * 2**20, "full": 5 * 10**9}  # HF's default max_shard_size is "5GB"
GR1_RESOLUTION = (256, 256)  # [W, H] of the GR1 sim ego_view (NVIDIA's demo_data/robot_sim.PickNPlace)

_NORM_SUFFIXES = ("norm.weight", "norm1.weight", "norm2.weight", "norm3.weight", "layernorm.weight",
                  "layer_norm1.weight", "layer_norm2.weight", "vlln.weight", "q_norm.weight", "k_norm.weight")


def tensor_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def random_tensor(spec: TensorSpec, seed: int) -> torch.Tensor:
    """Draw one tensor: norm gains near 1, biases small, matrices scaled by 1/sqrt(fan_in) so random
    activations stay O(1) through the whole model."""
    g = torch.Generator().manual_seed(tensor_seed(seed, spec.name))
    x = torch.randn(spec.shape, generator=g, dtype=torch.float32)
    name, shape = spec.name, spec.shape
    if name.endswith(_NORM_SUFFIXES):
        x = 1.0 + 0.05 * x
    elif len(shape) == 1 or name.endswith(".b") or name.endswith("in_proj_bias"):
        x = 0.02 * x
    elif name.endswith(("embed_tokens.weight", "position_embedding.weight", "future_tokens.weight", "probe")):
        x = 0.5 * x if "action_head" in name else 0.02 * x
    elif name.endswith(".W"):  # category-specific [n, in, out]
        x = x / math.sqrt(shape[1])
    else:  # nn.Linear [out, in] or Conv2d [out, in, kh, kw]
        x = x / math.sqrt(math.prod(shape[1:]))
    return x.to(spec.dtype)


def gr1_metadata(layout: Layout = GR1, seed: int = 0, resolution: tuple[int, int] = GR1_RESOLUTION) -> dict:
    """A well-formed ``experiment_cfg/metadata.json`` (NVIDIA's pydantic ``DatasetMetadata``,
    ``gr00t/data/schema.py`` on ``n1.5-release``)
    with plausible joint-range statistics for every state/action group of ``layout``."""
    rng = np.random.default_rng(seed)

    def stats(dim: int) -> dict[str, list[float]]:
        lo = -rng.uniform(0.5, 3.0, dim)
        hi = rng.uniform(0.5, 3.0, dim)
        mean = lo + (hi - lo) * rng.uniform(0.3, 0.7, dim)
        std = (hi - lo) * rng.uniform(0.1, 0.3, dim)
        q01 = lo + (hi - lo) * 0.01
        q99 = hi - (hi - lo) * 0.01
        return {k: [float(v) for v in arr] for k, arr in
                (("max", hi), ("min", lo), ("mean", mean), ("std", std), ("q01", q01), ("q99", q99))}

    def modality(dim: int) -> dict:
        return {"absolute": True, "rotation_type": None, "shape": [dim], "continuous": True}

    return {
        layout.embodiment: {
            "statistics": {
                "state": {name: stats(dim) for name, dim in layout.state_groups},
                "action": {name: stats(dim) for name, dim in layout.action_groups},
            },
            "modalities": {
                "video": {cam: {"resolution": list(resolution), "channels": 3, "fps": 20.0} for cam in layout.cameras},
                "state": {name: modality(dim) for name, dim in layout.state_groups},
                "action": {name: modality(dim) for name, dim in layout.action_groups},
            },
            "embodiment_tag": layout.embodiment,
        }
    }


def _key_stats(rng: np.random.Generator, dim: int, rows: int | None = None) -> dict[str, list]:
    """One key's min / max / mean / std / q01 / q99: shape (dim,), or (rows, dim) per chunk step for the relative
    statistics (their ranges grow with the step)."""
    shape = (dim,) if rows is None else (rows, dim)
    growth = 1.0 if rows is None else np.linspace(0.2, 1.0, rows)[:, None]
    lo = -rng.uniform(0.2, 1.5, shape) * growth
    hi = rng.uniform(0.2, 1.5, shape) * growth
    mean = lo + (hi - lo) * rng.uniform(0.3, 0.7, shape)
    std = (hi - lo) * rng.uniform(0.1, 0.3, shape)
    return {k: v.tolist() for k, v in (("min", lo), ("max", hi), ("mean", mean), ("std", std),
                                       ("q01", lo + (hi - lo) * 0.01), ("q99", hi - (hi - lo) * 0.01))}


def droid_statistics(layout: Layout = DROID, seed: int = 0) -> dict:
    """A well-formed N1.7 ``statistics.json``: state / action statistics per key and per-step
    (horizon × dim) relative-action statistics for the relative keys, the layout NVIDIA's
    ``gr00t/data/stats.py`` (N1.7) writes."""
    rng = np.random.default_rng(seed)
    horizon = 40

    def stats(dim: int, rows: int | None = None) -> dict[str, list]:
        return _key_stats(rng, dim, rows)

    relative = [k for k, rep in layout.action_reps if rep.startswith("relative")]
    return {layout.embodiment: {
        "state": {k: stats(d) for k, d in layout.state_groups},
        "action": {k: stats(d) for k, d in layout.action_groups},
        "relative_action": {k: stats(d, horizon) for k, d in layout.action_groups if k in relative},
    }}


def droid_processor_config(layout: Layout = DROID) -> dict:
    """``processor_config.json`` as ``Gr00tN1d7Processor.save_pretrained`` writes it (enum names)."""
    from .normalization_n17 import REPS as reps  # one table for writer and reader

    keys = [k for k, _ in layout.action_groups]
    modality = {
        "video": {"delta_indices": [-15, 0], "modality_keys": list(layout.cameras)},
        "state": {"delta_indices": [0], "modality_keys": [k for k, _ in layout.state_groups]},
        "action": {"delta_indices": list(range(40)), "modality_keys": keys, "action_configs": [
            {"rep": reps[rep][0], "type": reps[rep][1], "format": reps[rep][2], "state_key": key}
            for key, rep in layout.action_reps]},
        "language": {"delta_indices": [0], "modality_keys": ["annotation.language.language_instruction"]},
    }
    return {"processor_class": "Gr00tN1d7Processor", "processor_kwargs": {
        "modality_configs": {layout.embodiment: modality}, "image_crop_size": [230, 230],
        "image_target_size": [256, 256], "use_albumentations": True, "shortest_image_edge": 256,
        "crop_fraction": 0.95, "letter_box_transform": False, "model_name": "nvidia/Cosmos-Reason2-2B",
        "model_type": "qwen", "formalize_language": True, "max_state_dim": 132, "max_action_dim": 132,
        "max_action_horizon": 40, "use_percentiles": True, "use_mean_std": False, "clip_outliers": True,
        "apply_sincos_state_encoding": False, "use_relative_action": True, "exclude_state": False,
        "state_dropout_prob": 0.2}}


def n16_statistics(seed: int = 0, embodiments: tuple[N16Embodiment, ...] = tuple(N16_EMBODIMENTS.values())) -> dict:
    """A well-formed N1.6 ``statistics.json`` (spec §1.4): per tag, ``state`` and ``action`` statistics per key (D,)
    and ``relative_action`` per-step statistics (horizon × D) for the tag's relative action keys (empty if none)."""
    rng = np.random.default_rng(seed)
    return {e.tag: {
        "state": {k: _key_stats(rng, d) for k, d in e.state_groups},
        "action": {k: _key_stats(rng, d) for k, d in e.action_groups},
        "relative_action": {k: _key_stats(rng, d, e.horizon) for k, d in e.action_groups if k in e.relative},
    } for e in embodiments}


def n16_processor_config(embodiments: tuple[N16Embodiment, ...] = tuple(N16_EMBODIMENTS.values())) -> dict:
    """``processor_config.json`` as ``Gr00tN1d6Processor.save_pretrained`` writes it (spec §1.3, keys in its order),
    with the released base checkpoint's flags and the modality configs of ``embodiments``."""
    p = Gr00tN16ProcessorConfig()
    kwargs = {
        "modality_configs": {e.tag: e.modality_config() for e in embodiments}, "image_crop_size": None,
        "image_target_size": None, "use_albumentations": p.use_albumentations, "random_rotation_angle": None,
        "color_jitter_params": {"brightness": 0.3, "contrast": 0.4, "saturation": 0.5, "hue": 0.08},
        "shortest_image_edge": p.shortest_image_edge, "crop_fraction": p.crop_fraction, "model_name": p.model_name,
        "model_type": p.model_type, "formalize_language": p.formalize_language, "max_state_dim": p.max_state_dim,
        "max_action_dim": p.max_action_dim, "max_action_horizon": p.max_action_horizon,
        "use_percentiles": p.use_percentiles, "clip_outliers": p.clip_outliers,
        "apply_sincos_state_encoding": p.apply_sincos_state_encoding, "use_relative_action": p.use_relative_action,
    }
    return {"processor_class": N16_PROCESSOR_CLASS, "processor_kwargs": kwargs}


def plan_shards(inventory: list[TensorSpec], max_shard_bytes: int) -> list[list[TensorSpec]]:
    """Greedy split in state-dict order, like ``save_pretrained``: a shard closes when the next tensor
    would push it past the limit."""
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for spec in inventory:
        if shards[-1] and size + spec.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += spec.nbytes
    return shards


def n15_sidecars(seed: int) -> dict:
    return {METADATA_FILE: gr1_metadata(seed=seed)}


def n17_sidecars(seed: int) -> dict:
    return {"statistics.json": droid_statistics(seed=seed), "processor_config.json": droid_processor_config(),
            "embodiment_id.json": {"oxe_droid_relative_eef_relative_joint": 24, "libero_sim": 2, "new_embodiment": 10}}


def n16_sidecars(seed: int) -> dict:
    return {"statistics.json": n16_statistics(seed=seed), "processor_config.json": n16_processor_config(),
            "embodiment_id.json": dict(N16_EMBODIMENT_IDS)}


def version_recipe(version: str) -> tuple[str, str, str]:
    """Dotted paths of ``version``'s config class, tensor inventory and sidecar writer (its registry row)."""
    if version not in SPECS:
        raise ValueError(f"unknown version {version!r}")
    spec = SPECS[version]
    return spec.config_cls, spec.inventory, spec.synthetic_sidecars


def write_checkpoint(out: str | Path, *, scale: str = "tiny", seed: int = 0, max_shard_bytes: int | None = None,
                     version: str = "n15", log: Callable[[str], None] | None = None) -> Path:
    """Write a synthetic checkpoint of ``version`` to ``out`` and
    return its path."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    config_cls, inventory_fn, sidecars_fn = version_recipe(version)
    config = load(config_cls).preset(scale)
    specs = load(inventory_fn)(config)
    shards = plan_shards(specs, max_shard_bytes or DEFAULT_SHARD_BYTES[scale])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    total = sum(s.nbytes for s in specs)
    log(f"writing synthetic {version}/{scale} checkpoint (seed {seed}): {len(specs)} tensors, "
        f"{total / 1e9:.3f} GB in {len(shards)} shard(s) -> {out}")
    t0 = time.perf_counter()
    weight_map, written = {}, 0
    for k, shard in enumerate(shards, start=1):
        fname = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        tensors = {spec.name: random_tensor(spec, seed) for spec in shard}
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        (out / fname).chmod(0o644)  # safetensors writes 0600; snapshots are world-readable
        del tensors
        weight_map.update({spec.name: fname for spec in shard})
        written += sum(s.nbytes for s in shard)
        log(f"  {fname}: {len(shard)} tensors, {written / total:.0%} done, {time.perf_counter() - t0:.1f} s")
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    files = {INDEX_FILE: index, "config.json": config.to_checkpoint_json(record_backbone=scale != "full"),
             **load(sidecars_fn)(seed)}  # statistics, processor: what the loader reads
    files[SYNTHETIC_MARKER] = {"synthetic": True, "version": version, "scale": scale, "seed": seed,
                               "note": "random weights generated by make_synthetic_checkpoint.py; not a policy"}
    for name, content in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(content, indent=2) + "\n")
    log(f"done in {time.perf_counter() - t0:.1f} s")
    return out


def synthetic_info(directory: str | Path) -> dict | None:
    """The synthetic marker of a checkpoint directory, or None for real weights."""
    path = Path(directory) / SYNTHETIC_MARKER
    return json.loads(path.read_text()) if path.is_file() else None
