"""edgellm.common.allocator: applied on glibc (this test host), a no-op elsewhere; freed megabyte
buffers stuck between live allocations go back to the kernel on release."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from edgellm.common import allocator


def test_applies_on_glibc_and_is_idempotent() -> None:
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not a glibc host")
    assert allocator.tune_for_streaming() and allocator.tune_for_streaming()


def test_leaves_other_c_libraries_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("platform.libc_ver", lambda: ("bionic", ""))
    assert not allocator.tune_for_streaming()


PROBE = r"""
import ctypes
from edgellm.common.allocator import release_free_memory, tune_for_streaming

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

assert tune_for_streaming()  # 1 MiB buffers from the heap, as in the daemon
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
big, small = [], []
for _ in range(200):  # 1 MiB buffers, each pinned in place by a live allocation after it
    p = libc.malloc(1 << 20)
    ctypes.memset(p, 1, 1 << 20)
    big.append(p)
    small.append(libc.malloc(256 << 10))  # too big for the free lists: taken from the heap's top
for p in big:
    libc.free(p)
before = rss_mib()
assert release_free_memory()
print(before, rss_mib())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_release_gives_back_freed_buffers_the_trim_threshold_keeps() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    before, after = map(float, out.stdout.splitlines()[-1].split())  # after the log lines
    assert before - after > 150, (before, after)  # ~200 MiB freed but resident until released
