"""Whether a timing was spoiled by other processes: the rule the autotune and forward costs follow.

A trial is spoiled when either holds:

- **Others held the cores it needs.** Over the trial, the busy time of the CPUs this process may
  use (`/proc/stat`) minus this process's own CPU time, divided by the wall time, is how many cores
  other processes kept busy. A trial on `threads` of `cpus` cores leaves `cpus - threads` spare;
  when others used more than that plus SLACK_CORES, some of its threads waited for a core, and with
  MNN's barrier after every op one waiting thread stalls them all (a 2-thread trial fell from ~90
  to 4.3 tok/s this way). Android 8+ hides `/proc/stat` from apps: there this rule is silent.
- **Its repeats disagree.** The decode steps are timed in two halves; halves further apart than
  SPREAD mean the machine changed under the trial (portable: works where `/proc/stat` is hidden).

Steady contention on a phone, where only the second rule runs, is caught later by the live rate
check (core/retune.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

SLACK_CORES = 0.5  # background noise (a shell, a logger) a trial tolerates beyond its spare cores
SPREAD = 1.5  # fastest/slowest repeat ratio above which a trial is not one measurement


@dataclass(frozen=True)
class CpuTimes:
    """A reading: wall clock, this process's CPU seconds, busy seconds of the usable CPUs (None: hidden)."""

    wall_s: float
    own_s: float
    busy_s: float | None


CpuMeter = Callable[[], CpuTimes]


@dataclass(frozen=True)
class Verdict:
    """Whether a timing is spoiled, and why (for the log)."""

    spoiled: bool
    reason: str = ""


def busy_seconds(cpus: frozenset[int], root: Path = Path("/")) -> float | None:
    """Seconds the given CPUs spent not idle since boot (`/proc/stat`), None when it is unreadable."""
    try:
        text = (root / "proc" / "stat").read_text()
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or not name[3:].isdigit() or int(name[3:]) not in cpus:
            continue
        ticks = [int(v) for v in rest.split()]
        busy += sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)  # minus idle and iowait
    return busy / hz


def proc_meter(root: Path = Path("/"), cpus: frozenset[int] | None = None) -> CpuMeter:
    """A meter over `/proc/stat` under `root` for `cpus` (default: this process's affinity)."""
    if cpus is None:
        cpus = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
    usable = cpus
    return lambda: CpuTimes(time.perf_counter(), time.process_time(), busy_seconds(usable, root))


def others_cores(before: CpuTimes, after: CpuTimes) -> float | None:
    """Cores other processes kept busy on average between two readings (None when hidden)."""
    wall = after.wall_s - before.wall_s
    if before.busy_s is None or after.busy_s is None or wall <= 0:
        return None
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return max(0.0, others) / wall


def judge(before: CpuTimes, after: CpuTimes, threads: int, cpus: int, repeats: Sequence[float]) -> Verdict:
    """The rule above for a timing on `threads` of `cpus` cores, with its repeated rates."""
    others = others_cores(before, after)
    spare = max(0, cpus - threads)
    if others is not None and others > spare + SLACK_CORES:
        return Verdict(True, f"other processes kept {others:.1f} cores busy; {spare} were spare")
    low, high = min(repeats, default=0.0), max(repeats, default=0.0)
    if low <= 0 or high / low > SPREAD:
        return Verdict(True, f"repeats disagree ({low:.1f} vs {high:.1f} tok/s)")
    return Verdict(False)
