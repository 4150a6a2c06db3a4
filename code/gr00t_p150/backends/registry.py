# SPDX-License-Identifier: Apache-2.0
"""Which backends exist, how ``auto`` picks one, and one door to open any of them.

Every builder takes the same ``BackendSettings`` and returns a ``Backend``; the settings arrive as arguments
(the server's boot fills them from its configuration), so no backend reads the environment or imports the
server. An unknown name lists the registered ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .base import Backend


class BackendError(RuntimeError):
    """A backend that cannot open here; the message says why in one line."""


@dataclass(frozen=True)
class BackendSettings:
    """Everything any builder needs; each reads its own part."""

    checkpoint: Path
    version: str
    layout: str
    reason: str  # why this backend was chosen (``choose``), for /info
    log: Callable[[str], None]
    weights_id: str = "local"  # identifies the weights in on-disk caches (the TT-NN weight cache)
    demo_request: dict | None = None  # the version's demo request: the TT-NN traces are captured on it
    max_batch: int = 1  # requests per model call when micro-batching is on (TT-NN builds its static buckets for it)
    # torch
    torch_device: str = "auto"  # auto | cpu | cuda
    torch_dtype: str = "auto"  # auto | float32 | bfloat16 (the fast path's mixed precision, CPU or CUDA)
    torch_path: str = "auto"  # auto | fast | reference
    # ttnn
    mesh_shape: tuple[int, int] = (1, 1)
    tt_cache: Path | None = None  # device-layout weight cache
    cache_dir: Path | None = None  # where the mock P150 runtime is built
    tt_policy: str = "mixed_dit"
    tt_trace_layout: str = "per_stage"
    tt_mock: bool = False
    tt_num_cqs: int = 1
    tt_vit_fork: bool = True  # GR00T_VIT_FORK


def _open_torch(s: BackendSettings) -> Backend:
    from .torch_backend import TorchBackend, pick_torch_device, resolve_torch_dtype

    try:
        device, why = pick_torch_device(s.torch_device)
    except RuntimeError as exc:
        raise BackendError(str(exc)) from None
    dtype, dtype_why = resolve_torch_dtype(s.torch_dtype, device, s.torch_path)
    s.log(f"Opening device: torch {device}, {dtype} ({dtype_why})")
    try:
        return TorchBackend(s.checkpoint, s.version, s.layout, device, dtype, f"{s.reason}torch on {device} ({why})",
                            path=s.torch_path, dtype_reason=dtype_why)
    except Exception as exc:  # a bad checkpoint or an impossible dtype/path: name the problem in one line
        raise BackendError(f"loading {s.checkpoint} failed: {exc}") from None


def _open_ttnn(s: BackendSettings) -> Backend:
    from .ttnn_backend import TTNNBackend, TTNNBackendError, prepare_runtime

    try:
        prepare_runtime(s.tt_mock, s.cache_dir)
        return TTNNBackend(s.checkpoint, s.version, s.layout, mesh_shape=s.mesh_shape, cache_root=s.tt_cache,
                           weights_id=s.weights_id, dtype_policy=s.tt_policy, trace_layout=s.tt_trace_layout,
                           mock=s.tt_mock, warmup_request=s.demo_request, reason=s.reason, log=s.log,
                           num_cqs=s.tt_num_cqs, vit_fork=s.tt_vit_fork, max_batch=s.max_batch)
    except TTNNBackendError as exc:
        raise BackendError(str(exc)) from None
    except Exception as exc:  # a device or conversion failure: one line, the cause named
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise BackendError(f"TT-NN backend failed to start: {type(exc).__name__}: {first}") from None


BUILDERS: dict[str, Callable[[BackendSettings], Backend]] = {"torch": _open_torch, "ttnn": _open_ttnn}


def choose(requested: str, *, version: str, mock: bool = False, layout: str | None = None) -> tuple[str, str]:
    """(registered backend name, why) for ``GR00T_BACKEND=auto|<name>``. ``auto`` takes ttnn when a Tenstorrent
    device is present and the port serves ``version`` (and ``layout``: ``Layout.ttnn_refusal``), else torch (which
    then picks CPU or CUDA itself). The torch reason ends in ``"; "``: the torch builder appends the device it
    picked."""
    if mock and requested != "ttnn":
        raise BackendError("GR00T_TT_MOCK=1 is the TT-NN test mode: it needs GR00T_BACKEND=ttnn")
    if requested == "ttnn":
        return "ttnn", "ttnn (GR00T_TT_MOCK=1 (test mode))" if mock else "ttnn (GR00T_BACKEND=ttnn)"
    if requested == "torch":
        return "torch", ""
    if requested != "auto":
        raise BackendError(f"GR00T_BACKEND={requested!r}: expected auto or one of {sorted(BUILDERS)}")
    from models.experimental.gr00t.common.versions import get_spec
    from models.experimental.gr00t.tt.runner import device_present  # imports no ttnn

    from models.experimental.gr00t.common.layouts import get_layout

    present = device_present()
    spec = get_spec(version)
    why_not = spec.ttnn_refusal if not spec.ttnn else (get_layout(layout).ttnn_refusal if layout else None)
    if present and not why_not:
        return "ttnn", "ttnn (auto: a Tenstorrent device is present)"
    if present:
        return "torch", f"auto: a Tenstorrent device is present but {why_not}; "
    return "torch", "auto: no Tenstorrent device; "


def open_backend(name: str, settings: BackendSettings) -> Backend:
    """The registered backend ``name`` opened with ``settings``; raises ``BackendError`` (one line) when it
    cannot open, or when ``name`` is not registered."""
    builder = BUILDERS.get(name)
    if builder is None:
        raise BackendError(f"unknown backend {name!r}: registered backends are {sorted(BUILDERS)}")
    return builder(settings)
