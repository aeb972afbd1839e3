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
_M_ARENA_MAX = -8
TRIM_THRESHOLD_BYTES = 32 << 20
# Why 2 MiB: above a push's 1 MiB messages, so they stay on the heap (below), and no higher,
# because every buffer under the threshold is carved from one of the malloc arenas that gRPC's
# threads and the engine share. With 8 MiB, hostile multi-megabyte requests and long prompts'
# buffers left those arenas fragmented: the daemon's RSS after a model reload grew +16% over
# 3,000 fuzz calls and kept growing; with 2 MiB it stayed within 2% after the first 1,000
# (docs/reliability.md, "RSS under hostile load").
MMAP_THRESHOLD_BYTES = 2 << 20
# Why 2 arenas: glibc gives each new thread its own arena (up to 8 per core), and gRPC's threads
# each fragmented theirs; with two (and the 2 MiB threshold), 10,000 fuzz calls grew RSS +2.7%
# (from 278.7 MiB) instead of +13.4% (from 299.6 MiB) at the same speed. Set before the server
# starts its threads.
ARENA_MAX = 2


def tune_for_streaming() -> bool:
    """Keep 1 MiB message buffers on the heap instead of mapping and zeroing fresh pages for each.

    Why: with glibc's defaults a freed 1 MiB buffer at the top of the heap is trimmed back to the
    kernel and the next one faults its pages in again; page faults and page zeroing were ~10% of
    a push's CPU on both ends (docs/benchmarks.md). A fixed 32 MiB trim threshold bounds what the
    process keeps; the 2 MiB mmap threshold and two arenas keep buffers of hostile requests and
    long prompts from fragmenting per-thread heaps (the constants' comments). Other C libraries
    (Android's bionic, musl) have their own policies: left alone.
    Returns whether the settings were applied.
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        ok = libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1 and ok
        ok = libc.mallopt(_M_ARENA_MAX, ARENA_MAX) == 1 and ok
    except (OSError, AttributeError):
        return False
    log.debug(
        "malloc_tuned", applied=ok, trim=TRIM_THRESHOLD_BYTES, mmap=MMAP_THRESHOLD_BYTES, arenas=ARENA_MAX
    )
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
