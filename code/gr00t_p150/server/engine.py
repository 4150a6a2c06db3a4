# SPDX-License-Identifier: Apache-2.0
"""The one owner of the model and the device: a single device thread, the queue in front of it, and the
device-error accounting.

Boot (``boot.py``) and every model call run on the device thread, so requests are serialised and never share
state; a request's decoding and encoding happen before, on its own worker thread, so a malformed request never
reaches the model (or, for a small request while the device thread is idle, on the device thread just before
the model: ``prepare_and_run``). With micro-batching on (``GR00T_MAX_BATCH`` > 1, ``batching.py``) requests of
one shape that queue together share one model call. Nothing outside this module touches the backend: callers
get what they need here (``layout``, ``action_shape``, ``rtc_variants``, ``attach_rtc``, ``describe_backend``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .boot import Booted, boot
from .exceptions import DeadlineExpired, RequestRefused, as_request_refused
from .refusals import printable
from .settings import ServerConfig

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
        self.booted: Booted | None = None
        self.backend = None  # the booted backend; only the engine calls it
        self.ready = False
        self.closed = False
        self.device_errors = 0
        self.consecutive_device_errors = 0
        self.last_device_error: dict | None = None
        self.batcher = None  # a MicroBatcher once booted with micro-batching on
        self._device_jobs = 0  # jobs submitted to the device thread and not yet finished or cancelled
        self._device_jobs_lock = threading.Lock()

    @property
    def lost(self) -> bool:
        """The backend can no longer be trusted to serve: closed, or failing every request."""
        return self.closed or self.consecutive_device_errors >= LOST_AFTER

    # ---- what callers need of the model ---------------------------------------------------------
    @property
    def layout(self):
        return self.booted.layout if self.booted else None

    @property
    def weights(self):
        return self.booted.weights if self.booted else None

    @property
    def action_shape(self) -> tuple[int, int]:
        """(horizon, action_dim) of the served model-space chunk."""
        return self.backend.action_shape

    def modality_config(self) -> dict | None:
        """The served tag's modality config as the checkpoint stores it (N1.6), or None (the wire builds it)."""
        return self.backend.modality_config()

    @property
    def rtc_variants(self) -> tuple[str, ...]:
        return self.backend.rtc_variants

    @property
    def stage(self) -> str:
        return self.backend.stage

    def describe_backend(self) -> dict:
        return self.backend.describe()

    @property
    def selection(self) -> str:
        """Why this backend (and device) serves, for /info."""
        return self.backend.selection

    def attach_rtc(self, job, prepared) -> None:
        """Steer a prepared request by its session's previous chunk (an ``rtc.RtcJob``)."""
        from .rtc import attach_rtc

        attach_rtc(self.backend, job, prepared.inputs)

    # ---- boot and shutdown ----------------------------------------------------------------------
    async def start(self) -> None:
        booted = await asyncio.get_running_loop().run_in_executor(self._executor, self._boot)
        if booted.batching_off is None:
            from .batching import MicroBatcher

            self.batcher = MicroBatcher(self.config.max_batch, self.config.batch_window_ms, self.backend.batch_key,
                                        self._run_group, self._executor)
        self.ready = True

    def _boot(self) -> Booted:
        self.booted = boot(self.config)  # a failed boot closes what it opened (on this thread) and raises
        self.backend = self.booted.backend
        return self.booted

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
            return {"enabled": False, "reason": self.booted.batching_off if self.booted else None}
        info = self.batcher.describe()
        if self.booted.batch_buckets:  # static shapes: a batch runs at the next bucket, padded with copies
            info["static_buckets"] = self.booted.batch_buckets
        return info
