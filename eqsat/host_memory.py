"""Host memory a CPU program frees, kept in the process for its next call (glibc's ``malloc``).

XLA:CPU allocates a program's temporaries and its outputs on every call. glibc serves a block above
32 MiB (above 64 MiB in a thread's own arena, where XLA's calls run) with a fresh ``mmap`` and returns
it to the system when it is freed, so every call faults in and zeroes each page of it again: MobileNetV2
at 224x224, batch 8, optimized (78 MB of temporaries) took 19,156 page faults and 68-72 ms a call; with
its memory kept, none and 52-56 ms. Paddle Inference and oneDNN keep their buffers between runs.

``keep_host_memory()`` makes this process keep what it frees: no block is mapped on its own, the heap
is never trimmed, and every thread allocates from the one main arena (a thread's own arena is limited
to 64 MiB a heap, past which glibc maps blocks whatever it is told). The cost is the point: the
process's resident memory stays at its peak instead of falling back after each call. It is a setting
of the whole process, so eqsat never makes it on its own; a deployment, a benchmark or a server that
runs the same programs again and again calls it once, before JAX runs anything.

``give_back_freed()`` is the other way round, for work whose memory is transient: it returns what the
process has freed to the system (``malloc_trim``), unless ``keep_host_memory()`` was applied. The
optimizer calls it after timing kernels and after an optimization, so that what they held is not
added to the peak of what runs next: glibc keeps blocks it once mapped afresh in its heap afterwards
(its threshold for mapping rises to the size of a block freed), and the heap grows from kernel to
kernel. Timing four 16 MiB transposes raised the resident set by 250 MiB; given back, 36 MiB remained.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import warnings

from jax._src import xla_bridge

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_NEVER_TRIM = 2**31 - 1  # the largest value mallopt takes: trim only past 2 GiB free at the top
_keeping = False  # keep_host_memory() applied in this process


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name)
    return libc if all(hasattr(libc, f) for f in ("gnu_get_libc_version", "mallopt", "malloc_trim")) else None


def keep_host_memory() -> bool:
    """Keep the memory this process frees for its next allocations (see the module's docstring).

    Returns True where it was applied, False where the C library is not glibc (macOS, musl,
    Windows), which changes nothing. Call it before JAX starts its backend (its first array or
    computation): a thread that has allocated already keeps its own arena, whose blocks above 64 MiB
    are still mapped afresh, and a ``RuntimeWarning`` says so."""
    libc = _glibc()
    if libc is None:
        return False
    settings = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _NEVER_TRIM))
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    if not all(libc.mallopt(option, value) == 1 for option, value in settings):
        return False
    global _keeping
    _keeping = True
    if xla_bridge.backends_are_initialized():
        warnings.warn(
            "keep_host_memory() was called after JAX started its backend: JAX's threads keep the arenas"
            " they have, so their blocks above 64 MiB are still returned to the system",
            RuntimeWarning,
            stacklevel=2,
        )
    return True


def give_back_freed() -> bool:
    """Return the memory this process has freed to the system (see the module's docstring); whether
    anything was returned. Nothing where ``keep_host_memory()`` was applied, or where the C library
    is not glibc (whose ``free`` gives large blocks back on its own)."""
    libc = None if _keeping else _glibc()
    return libc is not None and libc.malloc_trim(0) == 1
