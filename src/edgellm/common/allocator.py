"""glibc malloc policy: keep streamed megabyte buffers on the heap, give freed memory back when idle."""

from __future__ import annotations

import ctypes
import functools
import platform
from collections.abc import Callable

from edgellm.common.logs import get_logger

log = get_logger(__name__)

# mallopt parameters from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD_BYTES = 32 << 20
MMAP_THRESHOLD_BYTES = 8 << 20


def tune_for_streaming() -> bool:
    """Keep 1 MiB message buffers on the heap instead of mapping and zeroing fresh pages for each.

    Why: with glibc's defaults a freed 1 MiB buffer at the top of the heap is trimmed back to the
    kernel and the next one faults its pages in again; page faults and page zeroing were ~10% of
    a push's CPU on both ends (docs/benchmarks.md). A fixed 32 MiB trim threshold bounds what the
    process keeps. Other C libraries (Android's bionic, musl) have their own policies: left alone.
    Returns whether the settings were applied.
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        ok = libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1 and ok
    except (OSError, AttributeError):
        return False
    log.debug("malloc_tuned", applied=ok, trim=TRIM_THRESHOLD_BYTES, mmap=MMAP_THRESHOLD_BYTES)
    return bool(ok)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def release_free_memory() -> bool:
    """Return the free pages of every malloc arena to the kernel (glibc `malloc_trim(0)`).

    Why: the trim threshold above only trims the *top* of each arena, and gRPC's thread pool
    allocates from several arenas, so after a hostile 1 MB request or a long prompt's activations
    the freed middle of those heaps stayed resident: 10,000 fuzz requests grew the daemon's RSS
    by 38-48% with no Python or engine leak (docs/reliability.md). `malloc_trim(0)` also
    `madvise`s free pages inside the heaps. The daemon calls it when the engine goes idle and
    after an unload, off the token path. Returns whether memory was released (False elsewhere).
    """
    fn = _malloc_trim()
    return bool(fn(0)) if fn is not None else False
