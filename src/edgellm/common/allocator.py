"""Tune glibc's malloc for a process that streams megabyte-sized buffers (artifact pushes)."""

from __future__ import annotations

import ctypes
import platform

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
