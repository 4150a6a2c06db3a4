# SPDX-License-Identifier: Apache-2.0
"""Request threads run torch single-threaded, so that torch's OpenMP workers belong to the device thread.

libgomp (the OpenMP runtime PyTorch's Linux wheels ship) gives every OS thread that enters a parallel
region its own team of workers, and once more workers exist than CPUs it cuts their spin-wait to a few
hundred iterations: from then on every parallel region, on every thread, pays a futex wake-up per worker.
On the 2-core build VM (Intel Xeon, AVX-512) the tiny model's device stage in ``make demo`` went from
29 ms to 11 ms (N1.5) and 84 ms to 45 ms (N1.7) once request threads ran single-threaded.
The host work of a request (image chain, tokenising, state) is small enough that one thread does it about
as fast, and the device thread keeps the whole pool. Other threads keep their setting; results do not
change (every op computes the same values with one thread).
"""

from __future__ import annotations

import ctypes
import logging
import threading

log = logging.getLogger("gr00t_p150")
_local = threading.local()
_warned = False


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
    try:
        ctypes.CDLL(None).omp_set_num_threads(1)
    except (AttributeError, OSError):
        pass
    _local.done = done = torch.get_num_threads() == 1
    global _warned
    if not done and not _warned:
        _warned = True
        log.warning("request threads could not be made single-threaded (no OpenMP runtime found): host work "
                    "shares torch's threads with the device thread")
    return done
