# SPDX-License-Identifier: Apache-2.0
"""Server configuration from the environment, read once at boot into one frozen object.

Every bad value fails at boot with the variable's name. Importing this imports nothing of torch, ttnn or
the port; reading the configuration consults the port's import-light tables (``common/versions.py``,
``tt/policy.py``), so no value is copied here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .exceptions import SettingError

BACKENDS = ("auto", "torch", "ttnn")
TORCH_DEVICES = ("auto", "cpu", "cuda")
# auto: bf16 on a CPU with native bf16 matrix instructions, else fp32 (backends/torch_backend.resolve_torch_dtype);
# bfloat16: the fast path only (checked when the device is known)
TORCH_DTYPES = ("auto", "float32", "bfloat16")
# auto: the fast path on CUDA or in bf16; in fp32 on the CPU the reference itself (it is the golden the boot gate
# compares against, and the fp32 fast path gains little there: see README "Torch fast path").
TORCH_PATHS = ("auto", "fast", "reference")
# What needs ``Authorization: Bearer <GR00T_API_KEY>`` when a key is set; /health always stays open.
AUTH_ROUTES = ("/predict", "/reset", "/info", "/demo", "/metrics", "/v1/models", "/docs", "/redoc", "/openapi.json")


def parse_mesh_shape(text: str) -> tuple[int, int]:
    """'1x1', '(1, 1)' and '1,1' → (1, 1)."""
    m = re.fullmatch(r"\s*\(?\s*(\d+)\s*[x×,]\s*(\d+)\s*\)?\s*", str(text))
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise SettingError(f"TT_MESH_SHAPE={text!r}: expected ROWSxCOLS such as '1x1', '(1, 1)' or '1,1'")
    return int(m.group(1)), int(m.group(2))


# as common/host_threads.py starts with (it is the port's, and importing the server imports nothing of it)
DEFAULT_FRAME_WORKERS = min(4, os.cpu_count() or 1)


@dataclass(frozen=True)
class ServerConfig:
    version: str
    embodiment: str
    layout: str
    weights: str  # "hub", "synthetic:tiny", "synthetic:full" or a local snapshot directory
    weights_repo: str
    weights_revision: str
    backend: str
    torch_device: str
    torch_dtype: str
    torch_path: str
    mesh_shape: tuple[int, int]
    tt_policy: str  # GR00T_POLICY
    tt_trace_layout: str  # GR00T_TRACE_LAYOUT
    tt_cache: Path  # GR00T_TT_CACHE: device-layout weight cache
    tt_mock: bool  # GR00T_TT_MOCK=1: test mode on a mock P150 (ops validated, nothing computed)
    warmup_runs: int
    warmup_pcc_min: float
    golden: Path | None  # explicit golden file for the fidelity gate (tests, audits)
    cache_dir: Path
    max_body_bytes: int
    max_queue: int = 8  # GR00T_MAX_QUEUE: requests admitted at once (decoding, waiting or on the device)
    request_timeout_ms: int = 0  # GR00T_REQUEST_TIMEOUT_MS: 0 = no deadline; else 504 if the device has not started
    body_timeout_s: float = 30.0  # GR00T_BODY_TIMEOUT_S: the whole body must arrive within this, else 408
    drain_timeout_s: float = 60.0  # GR00T_DRAIN_TIMEOUT_S: after SIGTERM, exit even if work is still running
    api_key: str | None = field(default=None, repr=False)  # GR00T_API_KEY: never logged, never in to_dict
    auth_routes: tuple[str, ...] = AUTH_ROUTES  # GR00T_AUTH_ROUTES: what needs the key when one is set
    tt_num_cqs: int = 1  # GR00T_NUM_CQS: TT command queues (2: inputs uploaded on CQ 1); default per version
    zmq_port: int | None = None  # GR00T_ZMQ_PORT: NVIDIA's GR00T PolicyServer protocol (ZMQ) on this port; unset = off
    zmq_host: str = "127.0.0.1"  # GR00T_ZMQ_HOST: the address it binds (NVIDIA's server binds every interface)
    zmq_allow_kill: bool = False  # GR00T_ZMQ_ALLOW_KILL=1: the ZMQ kill endpoint stops the server
    openpi_port: int | None = None  # GR00T_OPENPI_PORT: the openpi websocket protocol on this port; unset = off
    openpi_host: str = "127.0.0.1"  # GR00T_OPENPI_HOST
    max_sessions: int = 64  # GR00T_MAX_SESSIONS: robot sessions kept (least recently used first out)
    session_ttl_s: float = 300.0  # GR00T_SESSION_TTL_S: a session idle this long is forgotten
    max_batch: int = 1  # GR00T_MAX_BATCH: requests run as one model call (micro-batching); 1 = off
    batch_window_ms: float = 3.0  # GR00T_BATCH_WINDOW_MS: how long the oldest request waits for others; 0 = off
    # GR00T_FRAME_WORKERS: threads (1-16) a request's camera frames are decoded and resized on
    frame_workers: int = DEFAULT_FRAME_WORKERS
    vit_fork: bool = True  # GR00T_VIT_FORK: 1 = the tuned vision tower fidelity (tt/policy.py), 0 = verbatim (HiFi4)

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["api_key"]
        d["auth"] = "bearer" if self.api_key else "open"
        d["auth_routes"] = list(self.auth_routes)
        d["golden"] = str(self.golden) if self.golden else None
        d["cache_dir"] = str(self.cache_dir)
        d["tt_cache"] = str(self.tt_cache)
        return d


def _choice(env: Mapping[str, str], name: str, default: str | None, choices) -> str:
    value = env.get(name, default)
    if value is None:
        raise SettingError(f"{name} is required: set it to one of {list(choices)}")
    if value not in choices:
        raise SettingError(f"{name}={value!r}: expected one of {list(choices)}")
    return value


def _number(env: Mapping[str, str], name: str, default, lo, hi, parse, what: str):
    raw = env.get(name, str(default))
    try:
        value = parse(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r}: expected {what}") from None
    if not lo <= value <= hi:
        raise SettingError(f"{name}={value}: expected {lo}..{hi}")
    return value


def _int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    return _number(env, name, default, lo, hi, int, "an integer")


def _seconds(env: Mapping[str, str], name: str, default: float, lo: float, hi: float) -> float:
    return _number(env, name, default, lo, hi, float, "a number of seconds")


def parse_api_key(env: Mapping[str, str]) -> str | None:
    """GR00T_API_KEY: unset or empty = open. The value itself is never echoed in an error."""
    key = env.get("GR00T_API_KEY") or None
    if key is not None and (len(key) < 16 or not key.isascii() or not key.isprintable() or " " in key):
        raise SettingError("GR00T_API_KEY: expected at least 16 printable ASCII characters without spaces "
                           "(the value is not shown)")
    return key


def parse_auth_routes(env: Mapping[str, str]) -> tuple[str, ...]:
    """GR00T_AUTH_ROUTES: comma-separated paths that need the key; /health cannot be one of them."""
    raw = env.get("GR00T_AUTH_ROUTES")
    if raw is None:
        return AUTH_ROUTES
    routes = tuple(r.strip() for r in raw.split(",") if r.strip())
    bad = [r for r in routes if r not in AUTH_ROUTES]
    if bad:
        raise SettingError(f"GR00T_AUTH_ROUTES: {bad} not among {list(AUTH_ROUTES)} (/health always stays open)")
    return routes


def load_config(env: Mapping[str, str] | None = None) -> ServerConfig:
    """Read the configuration (``os.environ`` by default). ``GR00T_VERSION`` is never guessed."""
    from models.experimental.gr00t.common.layouts import get_layout
    from models.experimental.gr00t.common.versions import SPECS
    from models.experimental.gr00t.tt.policy import DTYPE_POLICIES, TRACE_LAYOUTS

    env = os.environ if env is None else env
    version = _choice(env, "GR00T_VERSION", None, tuple(SPECS))
    spec = SPECS[version]
    embodiment = env.get("GR00T_EMBODIMENT", spec.embodiment)
    tags = [s.embodiment for s in spec.served]
    if embodiment not in tags:
        raise SettingError(f"GR00T_EMBODIMENT={embodiment!r}: version {version} serves {tags}")
    served = spec.serving(embodiment)
    layout = env.get("GR00T_LAYOUT", served.layout)
    if layout != served.layout:
        raise SettingError(f"GR00T_LAYOUT={layout!r}: version {version} serves embodiment {embodiment!r} with "
                           f"layout {served.layout!r}")
    revision = env.get("TT_WEIGHTS_REVISION", spec.revision)
    if not re.fullmatch(r"[0-9a-f]{40}", revision):
        raise SettingError(f"TT_WEIGHTS_REVISION={revision!r}: expected a 40-hex commit sha")
    weights = env.get("GR00T_WEIGHTS", "hub")
    if weights.startswith("synthetic:") and weights not in ("synthetic:tiny", "synthetic:full"):
        raise SettingError(f"GR00T_WEIGHTS={weights!r}: synthetic weights are 'synthetic:tiny' or 'synthetic:full'")
    if weights != "hub" and not weights.startswith("synthetic:") and not Path(weights).is_dir():
        raise SettingError(f"GR00T_WEIGHTS={weights!r}: not 'hub', 'synthetic:tiny|full' "
                           "or an existing snapshot directory")
    raw_pcc = env.get("GR00T_WARMUP_PCC_MIN", "0.999")
    try:
        pcc_min = float(raw_pcc)
    except ValueError:
        raise SettingError(f"GR00T_WARMUP_PCC_MIN={raw_pcc!r}: expected a number") from None
    if not 0.0 < pcc_min <= 1.0:
        raise SettingError(f"GR00T_WARMUP_PCC_MIN={pcc_min}: expected a value in (0, 1]")
    golden = env.get("GR00T_GOLDEN")
    if golden and not Path(golden).is_file():
        raise SettingError(f"GR00T_GOLDEN={golden!r}: file not found")
    cache = Path(env.get("GR00T_CACHE") or Path.home() / ".cache" / "gr00t-p150")
    backend = _choice(env, "GR00T_BACKEND", "auto", BACKENDS)
    if backend == "ttnn" and not spec.ttnn:
        raise SettingError(f"GR00T_BACKEND=ttnn: GR00T_VERSION={version} cannot run there: {spec.ttnn_refusal}")
    if backend == "ttnn" and (why := get_layout(layout).ttnn_refusal):
        raise SettingError(f"GR00T_BACKEND=ttnn: {why}")
    return ServerConfig(
        version=version,
        embodiment=embodiment,
        layout=layout,
        weights=weights,
        weights_repo=spec.hf_repo,
        weights_revision=revision,
        backend=backend,
        torch_device=_choice(env, "GR00T_TORCH_DEVICE", "auto", TORCH_DEVICES),
        torch_dtype=_choice(env, "GR00T_TORCH_DTYPE", "auto", TORCH_DTYPES),
        torch_path=_choice(env, "GR00T_TORCH_PATH", "auto", TORCH_PATHS),
        mesh_shape=parse_mesh_shape(env.get("TT_MESH_SHAPE", "1x1")),
        tt_policy=_choice(env, "GR00T_POLICY", "mixed_dit", DTYPE_POLICIES),
        tt_trace_layout=_choice(env, "GR00T_TRACE_LAYOUT", "per_stage", TRACE_LAYOUTS),
        tt_cache=Path(env.get("GR00T_TT_CACHE") or cache / "tt"),
        tt_mock=_choice(env, "GR00T_TT_MOCK", "0", ("0", "1")) == "1",
        warmup_runs=_int(env, "GR00T_WARMUP_RUNS", 3, 1, 1000),
        warmup_pcc_min=pcc_min,
        golden=Path(golden) if golden else None,
        cache_dir=cache,
        max_body_bytes=_int(env, "GR00T_MAX_BODY_BYTES", 64 * 2**20, 1024, 2**31),
        max_queue=_int(env, "GR00T_MAX_QUEUE", 8, 1, 1024),
        request_timeout_ms=_int(env, "GR00T_REQUEST_TIMEOUT_MS", 0, 0, 3_600_000),
        body_timeout_s=_seconds(env, "GR00T_BODY_TIMEOUT_S", 30.0, 0.1, 3600.0),
        drain_timeout_s=_seconds(env, "GR00T_DRAIN_TIMEOUT_S", 60.0, 1.0, 3600.0),
        api_key=parse_api_key(env),
        auth_routes=parse_auth_routes(env),
        tt_num_cqs=_int(env, "GR00T_NUM_CQS", spec.tt_num_cqs, 1, 2),
        zmq_port=_port(env, "GR00T_ZMQ_PORT"),
        zmq_host=_host(env, "GR00T_ZMQ_HOST"),
        zmq_allow_kill=_choice(env, "GR00T_ZMQ_ALLOW_KILL", "0", ("0", "1")) == "1",
        openpi_port=_port(env, "GR00T_OPENPI_PORT"),
        openpi_host=_host(env, "GR00T_OPENPI_HOST"),
        max_sessions=_int(env, "GR00T_MAX_SESSIONS", 64, 1, 100_000),
        session_ttl_s=_seconds(env, "GR00T_SESSION_TTL_S", 300.0, 1.0, 86_400.0),
        max_batch=_int(env, "GR00T_MAX_BATCH", 1, 1, 64),
        batch_window_ms=_number(env, "GR00T_BATCH_WINDOW_MS", 3.0, 0.0, 1000.0, float, "a number of milliseconds"),
        frame_workers=_int(env, "GR00T_FRAME_WORKERS", DEFAULT_FRAME_WORKERS, 1, 16),
        vit_fork=_choice(env, "GR00T_VIT_FORK", "1", ("0", "1")) == "1",
    )


def _port(env: Mapping[str, str], name: str) -> int | None:
    """A TCP port for an optional protocol endpoint; unset or empty = the endpoint is off."""
    return None if not env.get(name) else _int(env, name, 0, 1, 65535)


def _host(env: Mapping[str, str], name: str) -> str:
    import ipaddress

    host = env.get(name) or "127.0.0.1"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise SettingError(f"{name}={host!r}: expected an IP address (127.0.0.1 for this machine only, "
                           "0.0.0.0 for every interface)") from None
    return host
