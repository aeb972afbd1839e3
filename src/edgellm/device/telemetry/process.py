"""Memory (/proc/meminfo) and this process's RSS, peak RSS and CPU time (/proc/self)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from edgellm.device.telemetry.sysfs import read_text


@dataclass(frozen=True)
class MemInfo:
    """System memory in bytes (0 when unknown)."""

    total_bytes: int
    available_bytes: int


@dataclass(frozen=True)
class ProcessInfo:
    """This process: resident set now and at its peak, CPU seconds over all threads."""

    rss_bytes: int
    rss_peak_bytes: int
    cpu_seconds: float


def _kib_fields(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1)
    return out


def read_meminfo(root: Path = Path("/")) -> MemInfo:
    """MemTotal and MemAvailable (MemFree + Cached on kernels older than 3.14)."""
    f = _kib_fields(read_text(root / "proc/meminfo"))
    avail = f.get("MemAvailable", f.get("MemFree", 0) + f.get("Cached", 0))
    return MemInfo(f.get("MemTotal", 0), avail)


def _task_cpu_seconds(stat: str | None, ticks: int) -> float:
    if not stat:
        return 0.0
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14, 15)
    except (IndexError, ValueError):
        return 0.0


def read_process(root: Path = Path("/")) -> ProcessInfo:
    """VmRSS / VmHWM from status; CPU time summed over /proc/self/task/*/stat (/proc/stat is denied)."""
    f = _kib_fields(read_text(root / "proc/self/status"))
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    cpu = sum(_task_cpu_seconds(read_text(t / "stat"), ticks) for t in (root / "proc/self/task").glob("*"))
    return ProcessInfo(f.get("VmRSS", 0), f.get("VmHWM", 0), cpu)
