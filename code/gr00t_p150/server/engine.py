# SPDX-License-Identifier: Apache-2.0
"""The one owner of the model and the device.

Boot (load → warm up → fidelity gate) and every prediction run on a single worker thread, so requests
are serialised and never share state; request parsing and image decoding happen before, on the
request's own thread, so a malformed request never reaches the model (or, for a small request while that
thread is idle, on the device thread just before the model: ``prepare_and_run``). With micro-batching on
(``GR00T_MAX_BATCH`` > 1, ``batching.py``) requests of one shape that queue together share one model call.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import platform
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .admission import DeadlineExpired
from .contract import contract, model_name
from .demo import load_demo_request
from .errors import BootError, RequestRefused, as_request_refused, printable
from .fidelity import Fidelity, gate, resolve_golden
from .settings import ServerConfig
from .weights import WeightsError, WeightsInfo, resolve_weights

log = logging.getLogger("gr00t_p150")
LOST_AFTER = 3  # consecutive unexpected device-thread errors after which the backend counts as lost (/health 503)


def _on_request_thread(host_work):
    from models.experimental.gr00t.common.host_threads import single_threaded_torch  # loaded at boot

    single_threaded_torch()  # torch's OpenMP pool stays the device thread's (see host_threads.py)
    return host_work()


def _check_deadline(deadline: float | None, where: str) -> None:
    if deadline is not None and time.perf_counter() > deadline:
        raise DeadlineExpired(f"the request's deadline passed {where}; the device never started on it")


class Engine:
    def __init__(self, config: ServerConfig, on_device_error=None):
        self.config = config
        self._on_device_error = on_device_error  # e.g. the Prometheus counter's ``inc``
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gr00t-device")
        self.backend = None
        self.weights: WeightsInfo | None = None
        self.layout = None
        self.fidelity: Fidelity | None = None
        self.warmup_ms: list[float] = []
        self.golden: dict | None = None
        self.backend_choice = ""
        self.fidelity_skipped: str | None = None
        self.golden_source = ""
        self.boot_s = 0.0
        self.ready = False
        self.closed = False
        self.device_errors = 0
        self.consecutive_device_errors = 0
        self.last_device_error: dict | None = None
        self.batcher = None  # a MicroBatcher once booted with GR00T_MAX_BATCH > 1 on a backend that batches
        self.batching_off: str | None = "GR00T_MAX_BATCH=1"
        self.batch_buckets: list[int] | None = None  # the backend's static batch sizes, when it has them
        self._device_jobs = 0  # jobs submitted to the device thread and not yet finished or cancelled
        self._device_jobs_lock = threading.Lock()

    @property
    def lost(self) -> bool:
        """The backend can no longer be trusted to serve: closed, or failing every request."""
        return self.closed or self.consecutive_device_errors >= LOST_AFTER

    # ---- boot -----------------------------------------------------------------------------------
    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._boot)

    def shutdown(self) -> None:
        """Release the backend (traces, device) on the device thread, after the requests already queued."""
        self.ready = False
        if self.batcher is not None:
            self.batcher.close()
        if self.backend is not None and not self.closed:
            self.closed = True
            try:
                self._executor.submit(self.backend.close).result()
                log.info("Backend closed: %s", self.backend.name)
            except Exception as exc:  # shutdown goes on; say what failed
                log.error("Closing the backend failed: %s: %s", type(exc).__name__, exc)
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _boot(self) -> None:
        t0 = time.perf_counter()
        c = self.config
        from models.experimental.gr00t.common.layouts import get_layout

        self.layout = get_layout(c.layout)
        log.info("Settings init: %s", json.dumps(c.to_dict()))
        try:
            self.weights = resolve_weights(c, log.info)
        except WeightsError as exc:
            raise BootError(str(exc)) from None
        if self.weights.synthetic:
            log.warning("Weights are SYNTHETIC (random, %s): responses are not a policy", self.weights.source)
        self.backend = self._open_backend()
        self._warm_up_and_gate()
        self._open_batcher()
        self.boot_s = time.perf_counter() - t0
        self.ready = True
        log.info("Model warmup completed: ready in %.1f s", self.boot_s)

    def _open_backend(self):
        c = self.config
        if c.tt_mock and c.backend != "ttnn":
            raise BootError("GR00T_TT_MOCK=1 is the TT-NN test mode: it needs GR00T_BACKEND=ttnn")
        if c.backend in ("auto", "ttnn"):
            from models.experimental.gr00t.common.versions import get_spec
            from models.experimental.gr00t.tt.runner import device_present  # imports no ttnn

            present = device_present()
            if c.backend == "ttnn":
                return self._open_ttnn("GR00T_TT_MOCK=1 (test mode)" if c.tt_mock else "GR00T_BACKEND=ttnn")
            if present and get_spec(c.version).ttnn:
                return self._open_ttnn("auto: a Tenstorrent device is present")
            self.backend_choice = (f"auto: a Tenstorrent device is present but the TT-NN port does not serve "
                                   f"{c.version}; " if present else "auto: no Tenstorrent device; ")
        from gr00t_p150.backends.torch_backend import TorchBackend, pick_torch_device

        try:
            device, reason = pick_torch_device(c.torch_device)
        except RuntimeError as exc:
            raise BootError(str(exc)) from None
        self.backend_choice += f"torch on {device} ({reason})"
        log.info("Loading weights: %s from %s", self.weights.source, self.weights.path)
        log.info("Opening device: torch %s, %s", device, c.torch_dtype)
        t = time.perf_counter()
        try:
            backend = TorchBackend(self.weights.path, c.version, c.layout, device, c.torch_dtype, self.backend_choice,
                                   path=c.torch_path)
        except Exception as exc:  # a bad checkpoint: name the problem in one line
            raise BootError(f"loading {self.weights.path} failed: {exc}") from None
        log.info("Model loaded and pipeline ready (%.1f s)", time.perf_counter() - t)
        return backend

    def _open_ttnn(self, reason: str):
        c = self.config
        from gr00t_p150.backends.ttnn_backend import TTNNBackend, TTNNBackendError, prepare_runtime

        self.backend_choice = f"ttnn ({reason})"
        try:
            prepare_runtime(c.tt_mock, c.cache_dir)
        except TTNNBackendError as exc:
            raise BootError(str(exc)) from None
        log.info("Loading weights: %s from %s into the TT-NN cache %s", self.weights.source, self.weights.path,
                 c.tt_cache)
        t = time.perf_counter()
        weights_id = f"{self.weights.source}-{self.weights.revision or 'local'}-{self.weights.fingerprint[:24]}"
        try:
            backend = TTNNBackend(self.weights.path, c.version, c.layout, mesh_shape=c.mesh_shape,
                                  cache_root=c.tt_cache, weights_id=weights_id, dtype_policy=c.tt_policy,
                                  trace_layout=c.tt_trace_layout, mock=c.tt_mock,
                                  warmup_request=load_demo_request(c.version), reason=self.backend_choice, log=log.info,
                                  num_cqs=c.tt_num_cqs)
        except TTNNBackendError as exc:
            raise BootError(str(exc)) from None
        except Exception as exc:  # a device or conversion failure: one line, the cause named
            raise BootError(f"TT-NN backend failed to start: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0]}") from None
        log.info("Model loaded and pipeline ready (%.1f s)", time.perf_counter() - t)
        return backend

    def _warm_up_and_gate(self) -> None:
        c = self.config
        from models.experimental.gr00t.common.observation import parse_observation

        request = load_demo_request(c.version)
        obs = parse_observation(request, self.layout)
        results = []
        for i in range(c.warmup_runs):
            t = time.perf_counter()
            results.append(self.backend.predict(obs, noise=request["noise"]))
            self.warmup_ms.append((time.perf_counter() - t) * 1e3)
            log.info("Warming up: %d/%d, %.1f ms", i + 1, c.warmup_runs, self.warmup_ms[-1])
        self.golden, source = resolve_golden(c, self.weights, self.backend, obs, request, results[0])
        self.golden_source = source
        if self.backend.mock:
            self.fidelity_skipped = "not applicable: the mock P150 validates ops but computes nothing"
            log.warning("Fidelity gate skipped (%s): MOCK test mode, responses are not a policy", self.fidelity_skipped)
            return
        self.fidelity = gate(results, self.golden, source, self.layout, c.warmup_pcc_min)
        f = self.fidelity
        log.info("Fidelity gate: PCC %.6f vs %s golden (min %.4f), deterministic=%s -> %s", f.pcc, f.golden_source,
                 f.pcc_min, f.deterministic, "PASS" if f.passed else "FAIL")
        f.raise_unless_passed()

    def _open_batcher(self) -> None:
        """Micro-batching when configured and the backend can run stacked requests; otherwise say why not."""
        c = self.config
        if c.max_batch <= 1:
            return
        why_not = getattr(self.backend, "batchable", "this backend runs one request at a time")
        if why_not is None and c.batch_window_ms <= 0:
            why_not = "GR00T_BATCH_WINDOW_MS=0"
        if why_not is not None:
            self.batching_off = why_not
            log.warning("GR00T_MAX_BATCH=%d ignored: %s; requests run one at a time", c.max_batch, why_not)
            return
        from models.experimental.gr00t.common.policy import batch_key

        from .batching import MicroBatcher

        self.batcher = MicroBatcher(c.max_batch, c.batch_window_ms, lambda prepared: batch_key(prepared.inputs),
                                    self._run_group, self._executor)
        self.batching_off = None
        log.info("Micro-batching on: up to %d requests per model call, %.1f ms window", c.max_batch,
                 c.batch_window_ms)
        self._warm_batch_buckets()

    def _warm_batch_buckets(self) -> None:
        """A backend with static batch buckets builds each bucket's buffers (and CUDA graphs) now, on the demo
        request, so that the first batch of each size does not pay for them."""
        from models.experimental.gr00t.common.observation import parse_observation

        buckets = self.backend.batch_buckets(self.config.max_batch)
        self.batch_buckets = buckets
        if not buckets:
            return
        request = load_demo_request(self.config.version)
        prepared = self.backend.prepare(parse_observation(request, self.layout), noise=request["noise"])
        for n in buckets[1:]:
            t = time.perf_counter()
            self.backend.run_batch([prepared] * n)
            log.info("Warming up batch bucket %d (of %s): %.1f ms", n, buckets, (time.perf_counter() - t) * 1e3)

    # ---- requests -------------------------------------------------------------------------------
    def prepare(self, obs, *, noise, seed, state_dtype, deadline: float | None = None):
        """Tokenise and encode, on the request's worker thread (a slow or hostile request never holds the
        device thread); raises ``RequestRefused`` for an input the model cannot take.

        ``deadline`` (``time.perf_counter()`` seconds): checked here, before encoding, and again by ``run``
        when the device thread picks the request up; once the device has started, the request is always
        finished."""
        _check_deadline(deadline, "before encoding")
        with as_request_refused():
            return self.backend.prepare(obs, noise=noise, seed=seed, state_dtype=state_dtype)

    async def run(self, prepared, *, deadline: float | None = None):
        """Run a prepared request on the device thread, after the requests queued before it (with micro-batching
        on, possibly in one model call with others of its shape)."""
        if self.batcher is not None:
            return await self.batcher.submit(prepared, deadline)
        return await self._device(self._run_one, prepared, deadline)

    async def prepare_and_run(self, host_work, *, deadline: float | None = None, small: bool = True):
        """``host_work()`` (a request's decoding and ``prepare``: a tuple whose last item is the prepared request),
        then ``run``; returns ``(host_work(), result)``.

        The host work runs on a request worker thread, so a slow or hostile request never holds the device
        thread, unless nothing is on or queued for the device thread, batching is off and the request is
        ``small``: then the device thread does it just before the model, saving two thread hand-offs (N1.5 on
        the 2-core Zen 3 VM: 0.67 ms less server overhead, median of 12 paired runs, README "host path"). The
        request is first in the device's queue either way; one arriving meanwhile finds the device busy, takes
        a worker thread and queues behind it, where before it could have overtaken only by finishing its own
        host work first, a few ms at most for a small body. Errors of the host work are the request's, never
        the backend's."""
        if self.batcher is None and small and self._device_jobs == 0:
            return await self._device(self._host_then_run, host_work, deadline)
        from starlette.concurrency import run_in_threadpool

        out = await run_in_threadpool(_on_request_thread, host_work)
        return out, await self.run(out[-1], deadline=deadline)

    def _host_then_run(self, host_work, deadline: float | None):
        from models.experimental.gr00t.common.host_threads import host_work_threads

        with host_work_threads(self.layout.n_images):
            out = host_work()  # raises the request's own errors (4xx), outside the device's error accounting
        return out, self._run_one(out[-1], deadline)

    def _device(self, fn, *args) -> asyncio.Future:
        """``fn(*args)`` on the device thread, counted so that ``prepare_and_run`` knows when it is idle."""
        with self._device_jobs_lock:
            self._device_jobs += 1
        job = self._executor.submit(fn, *args)
        job.add_done_callback(self._device_job_done)  # once: on the device thread, or where the job is cancelled
        return asyncio.wrap_future(job)

    def _device_job_done(self, _job) -> None:
        with self._device_jobs_lock:
            self._device_jobs -= 1

    def _run_one(self, prepared, deadline: float | None):
        _check_deadline(deadline, "while it waited for the device")
        return self._on_device(functools.partial(self.backend.run, prepared))

    def _on_device(self, work):
        """``work()`` on the device thread with the error accounting: a refusal is the request's, anything else
        counts against the backend (``lost`` after ``LOST_AFTER`` in a row)."""
        try:
            with as_request_refused():  # e.g. an input off the TT model's static shapes, refused before any write
                result = work()
        except RequestRefused:
            raise
        except Exception as exc:
            self._device_failed(exc)
            raise
        self.consecutive_device_errors = 0
        return result

    def _run_group(self, group) -> list:
        """A micro-batch on the device thread: the requests whose deadline passed are refused, the rest run as one
        model call; if that call fails, each runs alone, so one bad request fails alone. One outcome each."""
        outcomes: list = [None] * len(group)
        live = []
        for i, p in enumerate(group):
            try:
                _check_deadline(p.deadline, "while it waited for the device")
                live.append(i)
            except DeadlineExpired as exc:
                outcomes[i] = exc
        if len(live) > 1:
            try:
                results = self._on_device(functools.partial(self.backend.run_batch, [group[i].prepared for i in live]))
                for i, r in zip(live, results):
                    outcomes[i] = r
                return outcomes
            except Exception as exc:
                log.warning("a batch of %d failed (%s: %s); running its requests one by one", len(live),
                            type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        for i in live:
            try:
                outcomes[i] = self._on_device(functools.partial(self.backend.run, group[i].prepared))
            except Exception as exc:
                outcomes[i] = exc
        return outcomes

    def _device_failed(self, exc: Exception) -> None:
        self.device_errors += 1
        self.consecutive_device_errors += 1
        if self._on_device_error is not None:
            self._on_device_error()
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        self.last_device_error = {"type": type(exc).__name__, "message": printable(first_line),
                                  "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                  "consecutive": self.consecutive_device_errors}
        log.error("device thread error %d (%d in a row): %s: %s", self.device_errors,
                  self.consecutive_device_errors, type(exc).__name__, first_line)

    def batching_info(self) -> dict[str, Any]:
        if not self.batcher:
            return {"enabled": False, "reason": self.batching_off}
        info = self.batcher.describe()
        if self.batch_buckets:  # static shapes: a batch runs at the next bucket, padded with copies of a request
            info["static_buckets"] = self.batch_buckets
        return info

    def info(self) -> dict[str, Any]:
        import torch
        import transformers

        c, lay = self.config, self.layout
        return {
            "version": c.version,
            "model": model_name(c.version),
            "ready": self.ready,
            "stage": self.backend.stage if self.backend else None,
            "contract": contract(c, lay, *self.backend.action_shape) if self.backend else None,
            "weights": self.weights.to_dict() if self.weights else None,
            "backend": {**(self.backend.describe() if self.backend else {}), "selection": self.backend_choice},
            "warmup": {"runs": len(self.warmup_ms),
                       "median_ms": statistics.median(self.warmup_ms) if self.warmup_ms else None,
                       "all_ms": [round(x, 2) for x in self.warmup_ms]},
            "fidelity": {"skipped": self.fidelity_skipped} if self.fidelity_skipped else
                        self.fidelity.to_dict() if self.fidelity else None,
            "batching": self.batching_info(),
            "boot_s": round(self.boot_s, 2),
            "config": c.to_dict(),
            "software": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__},
        }
