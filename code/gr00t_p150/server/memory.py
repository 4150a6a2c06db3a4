# SPDX-License-Identifier: Apache-2.0
"""Keep the server's resident memory flat under glibc.

Decoded frames and JSON bodies are large, short-lived allocations made on many request threads. glibc
then opens up to 8 × cores malloc arenas and keeps freed pages in each, so RSS ratchets upward over a
long run. One arena is enough: the server's threads allocate in turn, not in a contention-bound loop, and
with two arenas the large per-request buffers (N1.7's 11 MB ``pixel_values``) landed in fresh pages on
some requests and paid ~2,700 page faults each (encode ~9.5 ms instead of ~7 ms on the 2-core build VM;
with one arena 0-1 of 120 requests were slow, with two 8-90 of 120, varying by process).
``malloc_trim`` after a large request hands its freed pages back. Both are no-ops where glibc is absent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_ARENA_MAX = -8  # glibc's mallopt parameter number
ARENAS = 1
TRIM_AFTER_BYTES = 4 * 2**20  # a request whose body or decoded frames exceed this is followed by a trim

_libc = None


def _glibc():
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            lib = ctypes.CDLL(name) if name else None
            _libc = lib if lib is not None and hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else False
        except OSError:
            _libc = False
    return _libc or None


def limit_arenas() -> int | None:
    """Cap malloc arenas (``MALLOC_ARENA_MAX`` in the environment wins); returns the cap set, or None."""
    libc = _glibc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return None
    libc.mallopt(M_ARENA_MAX, ARENAS)
    return ARENAS


def trim() -> None:
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
