# SPDX-License-Identifier: Apache-2.0
"""Request threads run torch single-threaded; other threads keep the process-wide setting; a request's frames
spread over the frame workers give the loop's results and the loop's first error."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from gr00t_p150.server import memory
from models.experimental.gr00t.common import host_threads
from models.experimental.gr00t.common.host_threads import single_threaded_torch


def _in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", fn()))
    t.start()
    t.join(30)
    assert not t.is_alive()
    return out["v"]


def test_single_threaded_torch_affects_only_the_calling_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the build VM has 2 CPUs; make the check meaningful anywhere
    try:
        def worker():
            ok = single_threaded_torch()
            x = torch.randn(64, 64)
            return ok, torch.get_num_threads(), single_threaded_torch(), (x @ x).shape

        ok, n, again, shape = _in_thread(worker)
        assert ok and again and n == 1 and shape == (64, 64)
        assert torch.get_num_threads() == 2  # the caller (here: the main thread) keeps its pool
        assert _in_thread(torch.get_num_threads) == 2  # a fresh thread does too
    finally:
        torch.set_num_threads(before)


def test_single_threaded_results_equal_the_pool():
    a, b = torch.randn(257, 129, generator=torch.Generator().manual_seed(0)), torch.randn(129, 65)
    pooled = torch.nn.functional.interpolate(a[None, None], size=(200, 100), mode="bilinear", antialias=True)
    single = _in_thread(lambda: (single_threaded_torch(), torch.nn.functional.interpolate(
        a[None, None], size=(200, 100), mode="bilinear", antialias=True))[1])
    assert torch.equal(pooled, single)
    assert torch.allclose(a @ b, _in_thread(lambda: (single_threaded_torch(), a @ b)[1]), rtol=0, atol=1e-4)


def test_limit_arenas_sets_one_unless_the_environment_says(monkeypatch):
    calls = []

    class FakeLibc:
        def mallopt(self, param, value):
            calls.append((param, value))

    monkeypatch.setattr(memory, "_libc", FakeLibc())
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert memory.limit_arenas() == 1 and calls == [(memory.M_ARENA_MAX, 1)]
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert memory.limit_arenas() is None and len(calls) == 1


@pytest.fixture
def workers():
    """Set the frame workers for one test; the process setting comes back afterwards."""
    before = host_threads.frame_workers()
    yield host_threads.set_frame_workers
    host_threads.set_frame_workers(before)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_frame_map_equals_the_loop_and_uses_the_helpers(workers, n):
    workers(n)
    seen, barrier = set(), threading.Barrier(n, timeout=10)

    def square(x):
        seen.add(threading.get_ident())
        if x < n:  # a thread holding one of the first n items waits for n threads: only the helpers can come
            barrier.wait()
        return x * x

    assert host_threads.frame_map(square, list(range(8))) == [x * x for x in range(8)]
    assert len(seen) == n  # the caller plus n - 1 helpers
    assert host_threads.frame_map(square, []) == []


def test_frame_map_raises_the_first_failing_item_like_the_loop(workers):
    workers(2)

    def fn(x):
        if x == 1:
            time.sleep(0.05)  # item 3 fails first in time; item 1's error must still be the one raised
            raise ValueError("item 1")
        if x == 3:
            raise KeyError("item 3")
        return x

    with pytest.raises(ValueError, match="item 1"):
        host_threads.frame_map(fn, list(range(6)))
    assert host_threads.frame_map(fn, [0, 2, 4]) == [0, 2, 4]  # the pool is still usable


def test_frame_helpers_are_single_threaded_in_torch(workers):
    workers(2)
    threads = host_threads.frame_map(lambda _: (time.sleep(0.01), torch.get_num_threads())[1], range(4))
    assert set(threads) <= {1, torch.get_num_threads()} and 1 in threads


def test_set_frame_workers_refuses_out_of_range(workers):
    for bad in (0, host_threads.MAX_FRAME_WORKERS + 1):
        with pytest.raises(ValueError, match="frame workers"):
            workers(bad)


def test_changing_the_workers_mid_map_lets_the_running_map_finish(workers):
    workers(2)
    started = threading.Event()

    def fn(x):
        started.set()
        time.sleep(0.01)
        return -x

    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", host_threads.frame_map(fn, list(range(10)))))
    t.start()
    assert started.wait(10)
    workers(3)  # while the map above still submits to and waits on the old pool
    t.join(30)
    assert out["v"] == [-x for x in range(10)]
    assert host_threads.frame_map(fn, list(range(6))) == [-x for x in range(6)]


@pytest.mark.parametrize("frames,workers_n,expect_one", [(1, 2, False), (4, 2, True), (4, 1, False)])
def test_host_work_threads_single_threads_only_while_frames_spread(workers, frames, workers_n, expect_one):
    workers(workers_n)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the device thread's pool, as on the 2-CPU build VM
    try:
        with host_threads.host_work_threads(frames):
            inside = torch.get_num_threads()
        assert inside == (1 if expect_one else 2)
        assert torch.get_num_threads() == 2  # the thread's own setting is back
    finally:
        torch.set_num_threads(before)
