"""How much memory one server process keeps: glibc's malloc arenas, and memory freed in bulk.

glibc gives each thread that allocates while another holds the heap lock an
arena of its own, up to eight per core, and memory freed in an arena mostly
stays with the process. A worker's executor threads (SQLite work, rate-limit
leases, the posting index build) are such threads: serving the 100k-listing
benchmark, the arenas they made held about 10 MiB more than the work needed
(docs/benchmarks.md, "Memory"). Threads here run Python and take the GIL, so
they rarely allocate at the same moment; two arenas serve them as fast.

A large build that is thrown away at once (the posting index's rows and
growing bitmaps) leaves freed memory that malloc keeps for later;
:func:`return_free_memory` hands it back to the system (``malloc_trim``), so the
worker's resident size is what it holds, not what it once built.

Only glibc has ``mallopt(M_ARENA_MAX)`` and ``malloc_trim``; elsewhere these do
nothing. An operator's ``MALLOC_ARENA_MAX`` environment variable wins (glibc
reads it when the process starts; this leaves it alone).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
from typing import Any

log = logging.getLogger("aap.memory")

#: ``M_ARENA_MAX`` of glibc's ``<malloc.h>``.
M_ARENA_MAX = -8
#: Arenas a server process uses at most.
ARENAS = 2


def _libc_function(name: str) -> Any:
    """The C library's function ``name`` (looked up in the running process, which has it
    loaded), or None where the C library has none (musl, macOS)."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):
        return None


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap this process's malloc arenas (before its threads start); True when applied."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied: bool = mallopt(M_ARENA_MAX, arenas) == 1
    if not applied:
        log.debug("malloc arena cap not applied")
    return applied


def return_free_memory() -> bool:
    """Give the memory malloc holds free back to the system (after a large build); True when done."""
    trim = _libc_function("malloc_trim")
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    gc.collect()  # what the build left in reference cycles goes first
    trim(0)
    return True
