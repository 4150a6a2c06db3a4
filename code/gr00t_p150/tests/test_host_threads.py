# SPDX-License-Identifier: Apache-2.0
"""Request threads run torch single-threaded; other threads keep the process-wide setting."""

from __future__ import annotations

import threading

import torch

from gr00t_p150.server import memory
from gr00t_p150.server.host_threads import single_threaded_torch


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
