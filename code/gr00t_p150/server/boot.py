# SPDX-License-Identifier: Apache-2.0
"""Boot, in order: weights → backend → warm-up → fidelity gate → batch buckets. Runs once, on the device thread
(``Engine.start``); a step that fails raises ``BootError`` with one line saying why, and the server does not
start. What boot found (``Booted``) is what /info, /demo and the metrics report.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from .exceptions import BootError, WeightsError
from .fidelity import Fidelity, gate, resolve_golden
from .settings import ServerConfig
from .weights import WeightsInfo, resolve_weights

log = logging.getLogger("gr00t_p150")


@dataclass
class Booted:
    config: ServerConfig
    layout: object  # common.layouts.Layout
    weights: WeightsInfo
    backend: object  # backends.base.Backend
    warmup_ms: list[float] = field(default_factory=list)
    golden: dict | None = None
    golden_source: str = ""
    fidelity: Fidelity | None = None
    fidelity_skipped: str | None = None  # why the gate did not run (a mock device)
    batching_off: str | None = None  # why requests run one at a time (None: micro-batching on)
    batch_buckets: list[int] | None = None  # the backend's static batch sizes, when it has them
    boot_s: float = 0.0

    def fidelity_info(self) -> dict | None:
        if self.fidelity_skipped:
            return {"skipped": self.fidelity_skipped}
        return self.fidelity.to_dict() if self.fidelity else None


def boot(config: ServerConfig) -> Booted:
    t0 = time.perf_counter()
    from models.experimental.gr00t.common.demo import load_demo_request
    from models.experimental.gr00t.common.layouts import get_layout
    from models.experimental.gr00t.common.observation import parse_observation

    layout = get_layout(config.layout)
    log.info("Settings init: %s", json.dumps(config.to_dict()))
    try:
        weights = resolve_weights(config, log.info)
    except WeightsError as exc:
        raise BootError(str(exc)) from None
    if weights.synthetic:
        log.warning("Weights are SYNTHETIC (random, %s): responses are not a policy", weights.source)
    request = load_demo_request(config.version, config.layout)
    backend = open_configured_backend(config, weights, request)
    booted = Booted(config, layout, weights, backend)
    try:
        demo_obs = parse_observation(request, layout)
        _warm_up_and_gate(booted, demo_obs, request)
        _plan_batching(booted, demo_obs, request)
    except BaseException:  # e.g. a TT device whose warm-up missed the gate: closed before the error goes up
        _close_quietly(backend)
        raise
    booted.boot_s = time.perf_counter() - t0
    log.info("Model warmup completed: ready in %.1f s", booted.boot_s)
    return booted


def _close_quietly(backend) -> None:
    try:
        backend.close()
        log.info("Backend closed: %s", backend.name)
    except Exception as exc:  # the boot error matters more; say what failed
        log.error("Closing the backend failed: %s: %s", type(exc).__name__, exc)


def open_configured_backend(c: ServerConfig, weights: WeightsInfo, demo_request: dict):
    """The backend ``GR00T_BACKEND`` names (``auto`` resolved), opened on ``weights``."""
    from gr00t_p150.backends.registry import BackendError, BackendSettings, choose, open_backend

    try:
        name, reason = choose(c.backend, version=c.version, mock=c.tt_mock, layout=c.layout)
    except BackendError as exc:
        raise BootError(str(exc)) from None
    where = f" into the TT-NN cache {c.tt_cache}" if name == "ttnn" else ""
    log.info("Loading weights: %s from %s%s", weights.source, weights.path, where)
    settings = BackendSettings(
        checkpoint=weights.path, version=c.version, layout=c.layout, reason=reason, log=log.info,
        weights_id=f"{weights.source}-{weights.revision or 'local'}-{weights.fingerprint[:24]}",
        demo_request=demo_request, torch_device=c.torch_device, torch_dtype=c.torch_dtype, torch_path=c.torch_path,
        mesh_shape=c.mesh_shape, tt_cache=c.tt_cache, cache_dir=c.cache_dir, tt_policy=c.tt_policy,
        tt_trace_layout=c.tt_trace_layout, tt_mock=c.tt_mock, tt_num_cqs=c.tt_num_cqs, tt_vit_fork=c.vit_fork,
        max_batch=c.max_batch if c.batch_window_ms > 0 else 1)
    t = time.perf_counter()
    try:
        backend = open_backend(name, settings)
    except BackendError as exc:
        raise BootError(str(exc)) from None
    log.info("Model loaded and pipeline ready (%.1f s)", time.perf_counter() - t)
    return backend


def _warm_up_and_gate(b: Booted, obs, request: dict) -> None:
    c = b.config
    results = []
    for i in range(c.warmup_runs):
        t = time.perf_counter()
        results.append(b.backend.predict(obs, noise=request["noise"]))
        b.warmup_ms.append((time.perf_counter() - t) * 1e3)
        log.info("Warming up: %d/%d, %.1f ms", i + 1, c.warmup_runs, b.warmup_ms[-1])
    b.golden, b.golden_source = resolve_golden(c, b.weights, b.backend, obs, request, results[0])
    if b.backend.mock:
        b.fidelity_skipped = "not applicable: the mock P150 validates ops but computes nothing"
        log.warning("Fidelity gate skipped (%s): MOCK test mode, responses are not a policy", b.fidelity_skipped)
        return
    b.fidelity = f = gate(results, b.golden, b.golden_source, b.layout, c.warmup_pcc_min)
    log.info("Fidelity gate: PCC %.6f vs %s golden (min %.4f), deterministic=%s -> %s", f.pcc, f.golden_source,
             f.pcc_min, f.deterministic, "PASS" if f.passed else "FAIL")
    f.raise_unless_passed()


def _plan_batching(b: Booted, obs, request: dict) -> None:
    """Micro-batching when configured and the backend can run stacked requests, else why not; a backend with
    static batch buckets builds each bucket's buffers (and CUDA graphs) now, on the demo request, so that the
    first batch of each size does not pay for them."""
    c = b.config
    if c.max_batch <= 1:
        b.batching_off = "GR00T_MAX_BATCH=1"
        return
    why_not = b.backend.batchable
    if why_not is None and c.batch_window_ms <= 0:
        why_not = "GR00T_BATCH_WINDOW_MS=0"
    if why_not is not None:
        b.batching_off = why_not
        log.warning("GR00T_MAX_BATCH=%d ignored: %s; requests run one at a time", c.max_batch, why_not)
        return
    log.info("Micro-batching on: up to %d requests per model call, %.1f ms window", c.max_batch, c.batch_window_ms)
    b.batch_buckets = buckets = b.backend.batch_buckets(c.max_batch)
    if not buckets:
        return
    prepared = b.backend.prepare(obs, noise=request["noise"])
    for n in buckets[1:]:
        t = time.perf_counter()
        b.backend.run_batch([prepared] * n)
        log.info("Warming up batch bucket %d (of %s): %.1f ms", n, buckets, (time.perf_counter() - t) * 1e3)
