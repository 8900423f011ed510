"""How the studio's process uses glibc's allocator, so a long-running server's memory stays flat.

Why: under many concurrent streamed replies (50 users in ``benchmarks/soak.py``), the app's RSS grew
~70 MiB/min while the memory its objects used (``mallinfo2().uordblks``, tracemalloc) stayed flat.
The growth was memory glibc's ``malloc`` kept but nothing used (``fordblks``), from two defaults:

* one arena per thread, up to 8 × cores: Gradio runs each handler in a worker thread, and a freed
  chunk can be reused only by allocations in its own arena;
* a *dynamic* mmap threshold: after a large block is freed, glibc raises the threshold up to 32 MiB,
  so later large strings (a long reply, its JSON) are carved from the heap and fragment it.

:func:`tune_allocator` sets ``M_ARENA_MAX`` and a fixed ``M_MMAP_THRESHOLD`` with ``mallopt`` (the
same as glibc's ``MALLOC_ARENA_MAX`` / ``MALLOC_MMAP_THRESHOLD_`` variables, which only work when set
before the process starts). It changes nothing when those variables or ``GLIBC_TUNABLES`` are set
(the operator chose), when another allocator is preloaded (jemalloc, tcmalloc), or off glibc.

Even so, glibc returns free memory to the system only from the top of its heap: after a burst (fifty
replies and a video inspection at once) the freed pages below a still-live block stay in the RSS.
:class:`PeriodicTrim` calls ``malloc_trim(0)`` every :data:`TRIM_INTERVAL_S` seconds from a daemon
thread, which hands every free page back (``madvise``), so the RSS follows what is in use.
vLLM's engine core runs in its own process and is not affected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

# mallopt parameter numbers from glibc's <malloc.h>.
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
ARENA_MAX = 2
MMAP_THRESHOLD = 64 * 1024  # bytes; a fixed value also turns glibc's dynamic threshold off
OPERATOR_VARIABLES = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")
OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")
TRIM_THREAD_NAME = "malloc-trim"
TRIM_INTERVAL_S = 30.0  # how often PeriodicTrim hands free pages back (17 ms for 185 MB of a fragmented heap here)


@dataclass(frozen=True)
class AllocatorTuning:
    """What :func:`tune_allocator` did: ``applied`` and, when it did nothing, ``reason``."""

    applied: bool
    reason: str = ""
    arena_max: int | None = None
    mmap_threshold: int | None = None


def _glibc() -> ctypes.CDLL | None:
    """The C library if it is glibc (it has ``mallopt`` and ``gnu_get_libc_version``), else None."""
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it (musl has no mallopt semantics)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (<malloc.h>), in bytes: ``uordblks`` + ``hblkhd`` are handed out
    (heap, mmapped), ``fordblks`` is free but held, ``hblks`` counts mmapped blocks."""

    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def mallinfo() -> MallInfo2 | None:
    """What glibc's ``malloc`` holds in this process now (None off glibc, or before glibc 2.33)."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = MallInfo2
    return libc.mallinfo2()


def _other_allocator(env: Mapping[str, str]) -> str | None:
    """``LD_PRELOAD`` if it preloads another allocator (jemalloc, tcmalloc, mimalloc), else None."""
    preload = env.get("LD_PRELOAD", "")
    return preload if any(name in preload for name in OTHER_ALLOCATORS) else None


def tune_allocator(environ: Mapping[str, str] | None = None) -> AllocatorTuning:
    """Set glibc's arena cap and a fixed mmap threshold for this process (see the module docstring).

    Call it early, before the server starts its threads: the arena cap applies to arenas created later.
    """
    env = os.environ if environ is None else environ
    chosen = [name for name in OPERATOR_VARIABLES if env.get(name)]
    if chosen:
        return AllocatorTuning(False, f"{', '.join(chosen)} set in the environment; left as configured")
    preload = _other_allocator(env)
    if preload:
        return AllocatorTuning(False, f"another allocator is preloaded ({preload})")
    libc = _glibc()
    if libc is None:
        return AllocatorTuning(False, "the C library is not glibc")
    if not (libc.mallopt(M_ARENA_MAX, ARENA_MAX) and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)):
        return AllocatorTuning(False, "glibc refused mallopt")
    return AllocatorTuning(True, arena_max=ARENA_MAX, mmap_threshold=MMAP_THRESHOLD)


class PeriodicTrim:
    """glibc's ``malloc_trim(0)`` every ``interval_s`` seconds, from a daemon thread (ctypes releases
    the GIL for the call). ``trims`` and ``last_s`` say how many ran and how long the last took."""

    def __init__(self, libc: ctypes.CDLL, interval_s: float = TRIM_INTERVAL_S) -> None:
        if not interval_s > 0:
            raise ValueError(f"the trim interval must be more than 0 s, not {interval_s}")
        self._trim = libc.malloc_trim
        self._trim.argtypes = [ctypes.c_size_t]
        self._trim.restype = ctypes.c_int
        self.interval_s = float(interval_s)
        self.trims = 0
        self.last_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=TRIM_THREAD_NAME, daemon=True)

    def trim_once(self) -> float:
        """Trim now; the seconds it took."""
        started = time.perf_counter()
        self._trim(0)
        self.last_s = time.perf_counter() - started
        self.trims += 1
        return self.last_s

    def start(self) -> PeriodicTrim:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.trim_once()


def start_periodic_trim(interval_s: float = TRIM_INTERVAL_S,
                        environ: Mapping[str, str] | None = None) -> PeriodicTrim | None:
    """Start :class:`PeriodicTrim` (None, and nothing started, off glibc, with another allocator
    preloaded, which returns memory its own way, or when one already runs: the allocator is the
    process's, so one trimming thread serves every app the process launches)."""
    if _other_allocator(os.environ if environ is None else environ):
        return None
    if any(thread.name == TRIM_THREAD_NAME for thread in threading.enumerate()):
        return None
    libc = _glibc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return None
    return PeriodicTrim(libc, interval_s).start()
