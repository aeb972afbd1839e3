"""edgellm.common.allocator: applied on glibc (this test host), a no-op elsewhere; freed megabyte
buffers stuck between live allocations go back to the kernel on release."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from edgellm.common import allocator
from tests.emulation import needs_exec


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


@needs_exec
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_release_gives_back_freed_buffers_the_trim_threshold_keeps() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    before, after = map(float, out.stdout.splitlines()[-1].split())  # after the log lines
    assert before - after > 150, (before, after)  # ~200 MiB freed but resident until released


ARENAS = r"""
import ctypes, re, threading
from edgellm.common.allocator import ARENA_MAX, tune_for_streaming

assert tune_for_streaming()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
gate = threading.Barrier(8)

def work():
    gate.wait()  # all eight allocate at once, so glibc would hand out new arenas
    ptrs = [libc.malloc(64 << 10) for _ in range(64)]
    gate.wait()
    for p in ptrs:
        libc.free(p)

threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
buf, size = ctypes.c_char_p(), ctypes.c_size_t()
libc.open_memstream.restype = ctypes.c_void_p
stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
libc.malloc_info(0, ctypes.c_void_p(stream))
libc.fclose(ctypes.c_void_p(stream))
print(ARENA_MAX, len(re.findall(rb"<heap nr=", buf.value)))
"""


@needs_exec
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="arenas are glibc's")
def test_threads_share_at_most_arena_max_arenas() -> None:
    """Eight threads allocating at once get no more than ARENA_MAX heaps (glibc's default: 8 per core)."""
    out = subprocess.run([sys.executable, "-c", ARENAS], capture_output=True, text=True, check=True)
    arena_max, heaps = map(int, out.stdout.splitlines()[-1].split())
    assert 1 <= heaps <= arena_max, heaps


FIXED = r"""
import ctypes, sys
from edgellm.common.allocator import tune_for_streaming

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

if sys.argv[1] == "tuned":
    assert tune_for_streaming()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
first = libc.malloc(16 << 20)  # mapped; freeing it raises glibc's dynamic threshold to 16 MiB
libc.free(first)
bufs, pins = [], []
for _ in range(40):  # 4 MiB layer-sized temporaries, each followed by a live allocation
    p = libc.malloc(4 << 20)
    ctypes.memset(p, 1, 4 << 20)
    bufs.append(p)
    pins.append(libc.malloc(256 << 10))
before = rss_mib()
for p in bufs:
    libc.free(p)
print(before - rss_mib())
"""


@needs_exec
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the dynamic mmap threshold is glibc's")
def test_a_fixed_threshold_unmaps_freed_temporaries_the_dynamic_one_keeps() -> None:
    """After one 16 MiB free, glibc's default heap-allocates 4 MiB buffers and keeps them resident."""
    freed = {}
    for mode in ("default", "tuned"):
        out = subprocess.run([sys.executable, "-c", FIXED, mode], capture_output=True, text=True, check=True)
        freed[mode] = float(out.stdout.splitlines()[-1])
    assert freed["tuned"] > 150 > freed["default"], freed  # 160 MiB back to the kernel, or kept


def test_opening_a_model_to_build_applies_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Convert and quantize both open the model through LoadedModel.open: it tunes malloc first."""
    from edgellm.host.builder import loaded

    calls: list[str] = []

    def tune() -> bool:
        calls.append("tuned")
        return True

    monkeypatch.setattr(loaded, "tune_for_streaming", tune)
    monkeypatch.setattr(loaded, "resolve_source", lambda _m: (_ for _ in ()).throw(RuntimeError("stop")))
    with pytest.raises(RuntimeError, match="stop"):
        loaded.LoadedModel.open("default")
    assert calls == ["tuned"]
