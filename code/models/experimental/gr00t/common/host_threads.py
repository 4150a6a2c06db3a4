# SPDX-License-Identifier: Apache-2.0
"""Host threads: request threads run torch single-threaded, and a request's camera frames are decoded and
resized side by side on a few such threads.

libgomp (the OpenMP runtime PyTorch's Linux wheels ship) gives every OS thread that enters a parallel
region its own team of workers, and once more workers exist than CPUs it cuts their spin-wait to a few
hundred iterations: from then on every parallel region, on every thread, pays a futex wake-up per worker.
On the 2-core build VM (Intel Xeon, AVX-512) the tiny model's device stage in ``make demo`` went from
29 ms to 11 ms (N1.5) and 84 ms to 45 ms (N1.7) once request threads ran single-threaded. The device
thread keeps the whole pool; other threads keep their setting; results do not change (every op computes
the same values with one thread).

``frame_map`` is the one place a request's host work runs in parallel: the frames of a request are
independent (N1.7: four camera frames through PNG decoding, the DROID chain and the Qwen resize), so the
calling thread and up to ``frame_workers() − 1`` helpers, each single-threaded in torch, take them in turn.
Each frame is computed by the same code as on one thread, so the values are bit-identical; an error is the
one of the first failing frame in order, as a plain loop would raise it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

log = logging.getLogger("gr00t_p150")
_local = threading.local()
_warned = False

T, R = TypeVar("T"), TypeVar("R")
MAX_FRAME_WORKERS = 16
_workers = max(1, min(4, os.cpu_count() or 1))  # the calling thread counts as one
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _omp_set_num_threads():
    """The OpenMP runtime's per-thread ``omp_set_num_threads``, or None where it cannot be reached."""
    try:
        return ctypes.CDLL(None).omp_set_num_threads
    except (AttributeError, OSError):
        return None


def single_threaded_torch() -> bool:
    """Set torch's intra-op threads to 1 on the calling thread only (once per thread; cheap after that).
    Returns whether it holds; where the OpenMP runtime cannot be reached the thread keeps its setting and
    one warning says so."""
    done = getattr(_local, "done", None)
    if done is not None:
        return done
    import torch

    # ATen copies the process-wide setting into a thread's OpenMP state on the thread's first call; make
    # that happen first, then override it for this thread alone (torch.set_num_threads would change the
    # process-wide value as well).
    torch.get_num_threads()
    omp_set_num_threads = _omp_set_num_threads()
    if omp_set_num_threads is not None:
        omp_set_num_threads(1)
    _local.done = done = torch.get_num_threads() == 1
    global _warned
    if not done and not _warned:
        _warned = True
        log.warning("request threads could not be made single-threaded (no OpenMP runtime found): host work "
                    "shares torch's threads with the device thread")
    return done


@contextlib.contextmanager
def host_work_threads(n_frames: int):
    """A request's host work on a thread that keeps torch's pool (the device thread, when it is idle): with one
    frame the pool stays, and the frame's ops (the resize above all) split over the cores; with several frames
    spread by ``frame_map``, the thread is single-threaded for the block, as a request thread is, and gets its
    setting back after. (Keeping the pool while the frames spread made N1.7's encode 1 ms slower on the 2-core
    VM: the helpers and the pool's workers took turns on the cores.) Values do not change either way."""
    import torch

    n = torch.get_num_threads()
    omp = _omp_set_num_threads() if n > 1 and n_frames > 1 and _workers > 1 else None
    if omp is None:
        yield
        return
    omp(1)
    try:
        yield
    finally:
        omp(n)


def frame_workers() -> int:
    """Threads a request's frames are spread over, the calling thread included (1 = a plain loop)."""
    return _workers


def set_frame_workers(n: int) -> None:
    """Set ``frame_workers`` (1…16) for the process. A pool of another size is only let go: a ``frame_map``
    still using it finishes on it, and its threads end once nothing refers to it (the executor's own cleanup)."""
    global _workers, _pool
    if not 1 <= n <= MAX_FRAME_WORKERS:
        raise ValueError(f"frame workers must be 1…{MAX_FRAME_WORKERS}, got {n}")
    with _pool_lock:
        if n != _workers:
            _pool = None
        _workers = n


def _helpers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_workers - 1, thread_name_prefix="gr00t-frames",
                                       initializer=single_threaded_torch)
        return _pool


def frame_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``, the items shared between the calling thread and the frame helpers.

    ``fn`` must be safe to run concurrently on different items (pure, or writing disjoint outputs). Every
    item runs; the exception of the lowest-index failing item is raised, which is the one the loop raises.
    Helpers that have not started when the caller has finished are cancelled, so a busy pool never holds
    a request up."""
    helpers = min(_workers, len(items)) - 1
    if helpers <= 0:
        return [fn(x) for x in items]
    results: list = [None] * len(items)
    errors: list[BaseException | None] = [None] * len(items)
    order, lock = iter(range(len(items))), threading.Lock()

    def drain() -> None:
        while True:
            with lock:
                i = next(order, None)
            if i is None:
                return
            try:
                results[i] = fn(items[i])
            except BaseException as e:  # re-raised on the calling thread, in item order
                errors[i] = e

    pool = _helpers()
    futures = [pool.submit(drain) for _ in range(helpers)]
    drain()
    for f in futures:
        if not f.cancel():
            f.result()
    for e in errors:
        if e is not None:
            raise e
    return results
