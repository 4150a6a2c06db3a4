# SPDX-License-Identifier: Apache-2.0
"""Lazy access to a Hugging Face style safetensors checkpoint (index + shards).

Only the JSON headers are read up front, so names, shapes and stored dtypes are known without
loading a byte of weights; tensors are read on demand. Errors name the file and the key.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from .errors import CheckpointError, ConfigError

INDEX_FILE = "model.safetensors.index.json"
STAGING_BYTES = 64 << 20  # bounded read buffer for tensors loaded with a cast
SINGLE_FILE = "model.safetensors"

_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


def read_json(path: Path, role: str):
    """One of a checkpoint's JSON files (config, statistics, …): parsed, or one clear ``ConfigError``
    saying which file and what it is for."""
    if not path.is_file():
        raise ConfigError(f"{path}: not found ({role})")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: invalid JSON ({exc})") from None


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    file: Path
    offset: int = 0  # absolute byte offset of the data in ``file``


def read_safetensors_header(path: Path) -> dict[str, TensorInfo]:
    """Parse a safetensors header (8-byte little-endian length + JSON) without reading weights."""
    try:
        with path.open("rb") as fh:
            raw_len = fh.read(8)
            if len(raw_len) != 8:
                raise CheckpointError(f"{path}: not a safetensors file (too short)")
            (n,) = struct.unpack("<Q", raw_len)
            if n > 100_000_000:
                raise CheckpointError(f"{path}: not a safetensors file (header length {n})")
            header = json.loads(fh.read(n))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: unreadable safetensors header ({exc})") from None
    infos, data_start = {}, 8 + n
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = _SAFETENSORS_DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise CheckpointError(f"{path}: tensor {name!r} has unsupported dtype {entry.get('dtype')!r}")
        infos[name] = TensorInfo(name, tuple(entry["shape"]), dtype, path, data_start + int(entry["data_offsets"][0]))
    return infos


class LazyCheckpoint:
    """Names, shapes and dtypes of every tensor in a checkpoint directory; tensors load on demand."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise CheckpointError(f"{self.directory}: checkpoint directory not found")
        self._infos: dict[str, TensorInfo] = {}
        index_path = self.directory / INDEX_FILE
        if index_path.is_file():
            self._read_index(index_path)
        elif (self.directory / SINGLE_FILE).is_file():
            self._infos = read_safetensors_header(self.directory / SINGLE_FILE)
        else:
            raise CheckpointError(f"{self.directory}: neither {INDEX_FILE} nor {SINGLE_FILE} found")

    def _read_index(self, index_path: Path) -> None:
        try:
            weight_map = json.loads(index_path.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{index_path}: malformed index ({exc!r})") from None
        for shard in sorted(set(weight_map.values())):
            shard_path = self.directory / shard
            if not shard_path.is_file():
                raise CheckpointError(f"{index_path}: shard {shard} is listed but missing")
            for name, info in read_safetensors_header(shard_path).items():
                if weight_map.get(name) != shard:
                    raise CheckpointError(f"{shard_path}: tensor {name!r} is not mapped to this shard by the index")
                self._infos[name] = info
        unresolved = sorted(set(weight_map) - set(self._infos))
        if unresolved:
            raise CheckpointError(f"{index_path}: {len(unresolved)} indexed tensors missing from their shards, "
                                  f"e.g. {unresolved[0]!r}")

    # ---- inventory ---------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._infos)

    def __contains__(self, name: str) -> bool:
        return name in self._infos

    def info(self, name: str) -> TensorInfo:
        try:
            return self._infos[name]
        except KeyError:
            raise CheckpointError(f"{self.directory}: tensor {name!r} not in checkpoint") from None

    @property
    def nbytes(self) -> int:
        return sum(_numel(i.shape) * i.dtype.itemsize for i in self._infos.values())

    # ---- loading ---------------------------------------------------------------------------
    def load(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        info = self.info(name)
        with safe_open(str(info.file), framework="pt") as fh:
            tensor = fh.get_tensor(name)
        return tensor if dtype is None else tensor.to(dtype)

    def load_many(self, names: Iterable[str], dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """Load several tensors, opening each shard once.

        Tensors already stored in ``dtype`` come from safetensors as they are (backed by the shard's
        mapping: pages count as resident only once touched). Tensors that need a cast are read with
        plain file reads through a bounded staging buffer instead: cast from the mapping, their stored
        bytes stayed resident in it for as long as any zero-copy tensor of the same shard lived (2.7 GB
        of bf16 pages for the full N1.5 synthetic checkpoint, the bulk of the reference's peak RSS above
        its fp32 weights). The values are the same: a widening cast is exact either way."""
        by_file: dict[Path, list[str]] = {}
        for name in names:
            by_file.setdefault(self.info(name).file, []).append(name)
        out = {}
        for path, shard_names in by_file.items():
            cast = {n for n in shard_names if dtype is not None and self.info(n).dtype != dtype}
            if len(cast) < len(shard_names):
                with safe_open(str(path), framework="pt") as fh:
                    for name in shard_names:
                        if name not in cast:
                            out[name] = fh.get_tensor(name)
            if cast:
                # One staging buffer for the whole shard: a fresh one per tensor, freed between the
                # results, fragmented the heap by ~5 % of the weights (0.6 GiB at N1.7 full size).
                largest = max(_numel(self.info(n).shape) * self.info(n).dtype.itemsize for n in cast)
                staging = torch.empty(min(largest, STAGING_BYTES), dtype=torch.uint8)
                with path.open("rb") as raw:
                    for name in (n for n in shard_names if n in cast):
                        out[name] = _read_cast(raw, self.info(name), dtype, staging)
        return out

    def check_against(self, expected: Mapping[str, tuple[int, ...]], *, prefix: str = "",
                      optional: Iterable[str] = ()) -> None:
        """Raise one clear error when the checkpoint (under ``prefix``) and ``expected`` disagree.

        ``expected`` maps names (without prefix) to shapes; ``optional`` are full names that may be
        present in the checkpoint without being expected (e.g. a saved tied lm_head).
        """
        optional = set(optional)
        have = {n[len(prefix):]: i for n, i in self._infos.items() if n.startswith(prefix) and n not in optional}
        missing = [n for n in expected if n not in have]
        unexpected = [n for n in have if n not in expected]
        wrong = [(n, have[n].shape, s) for n, s in expected.items() if n in have and tuple(have[n].shape) != tuple(s)]
        problems = []
        if missing:
            problems.append(f"{len(missing)} missing key(s), first {prefix + missing[0]!r}")
        if unexpected:
            problems.append(f"{len(unexpected)} unexpected key(s), first {prefix + unexpected[0]!r}")
        if wrong:
            n, got, want = wrong[0]
            problems.append(f"{len(wrong)} shape mismatch(es), first {prefix + n!r}: "
                            f"checkpoint {list(got)} vs model {list(want)}")
        if problems:
            raise CheckpointError(f"{self.directory}: " + "; ".join(problems))


def load_module(module: torch.nn.Module, checkpoint: LazyCheckpoint, *, prefix: str = "",
                dtype: torch.dtype = torch.float32, optional: Iterable[str] = (),
                dtypes: dict[str, torch.dtype] | None = None) -> None:
    """Load ``module`` from ``checkpoint`` strictly: every parameter and buffer key must be there with
    the right shape, nothing extra (besides ``optional``). Works for modules built on the meta device
    (tensors are assigned, not copied), so peak memory is one copy of the weights. ``dtypes``: keys (of
    ``module``) loaded in another dtype than ``dtype`` (a mixed-precision model loaded as it will run)."""
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    checkpoint.check_against(expected, prefix=prefix, optional=optional)
    groups: dict[torch.dtype, list[str]] = {}
    for k in expected:
        groups.setdefault((dtypes or {}).get(k, dtype), []).append(prefix + k)
    state = {name: t for dt, names in groups.items() for name, t in checkpoint.load_many(names, dtype=dt).items()}
    module.load_state_dict({k[len(prefix):]: v for k, v in state.items()}, strict=True, assign=True)


def _read_cast(raw, info: TensorInfo, dtype: torch.dtype, staging: torch.Tensor) -> torch.Tensor:
    """One stored tensor cast to ``dtype`` through ``staging`` (uint8), chunk by chunk."""
    n, item = _numel(info.shape), info.dtype.itemsize
    out = torch.empty(n, dtype=dtype)
    per = max(1, staging.numel() // item)
    raw.seek(info.offset)
    for start in range(0, n, per):
        k = min(per, n - start)
        chunk = staging[: k * item]
        if raw.readinto(memoryview(chunk.numpy())) != k * item:
            raise CheckpointError(f"{info.file}: tensor {info.name!r} is truncated")
        out[start:start + k] = chunk.view(info.dtype)  # safetensors data is little-endian, like the host
    return out.view(info.shape)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def fingerprint(directory: Path, *, content: bool = False) -> str:
    """sha256 over the small JSON files and, per shard, either its whole content (``content``) or its
    size, mtime and safetensors header (or, for a Hugging Face cache symlink, the content-addressed
    blob name it points to). The shipped demo goldens carry the content fingerprint of the checkpoint they were
    made on (``demo/make_demo.py``), which the server's fidelity gate compares."""
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors.index.json", "experiment_cfg/metadata.json", "statistics.json",
                 "processor_config.json", "embodiment_id.json", "SYNTHETIC.json"):
        p = directory / name
        if p.is_file():
            h.update(name.encode() + b"\0" + p.read_bytes())
    for shard in sorted(directory.glob("model*.safetensors")):
        h.update(shard.name.encode())
        if content:
            with shard.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    h.update(block)
        elif shard.is_symlink() and "blobs" in Path(os.readlink(shard)).parts:
            h.update(Path(os.readlink(shard)).name.encode())
        else:
            st = shard.stat()
            with shard.open("rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                h.update(f"{st.st_size}:{st.st_mtime_ns}".encode() + fh.read(min(n, 100_000_000)))
    return h.hexdigest()
