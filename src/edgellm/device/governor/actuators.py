"""Apply an Actuation to the real process: thread affinity (read back) and pacing between steps.

Thread count and MNN's power hint only take effect when the runtime is (re)built: MNN reads
thread_num/power in initRuntime(), which only load() calls; the engine reload is the core's job.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

from edgellm.common.logs import get_logger
from edgellm.device.governor.actuation import Actuation

log = get_logger(__name__)


def set_process_affinity(cpus: Iterable[int], task_dir: Path = Path("/proc/self/task")) -> tuple[int, ...]:
    """Pin every thread of this process (MNN's workers included) to cpus within the allowed set.

    sched_setaffinity(0) moves only the calling thread, so each task id is set. Returns the set the
    kernel reports back: Android may refuse big cores to a background app.
    """
    wanted = set(cpus)
    if not wanted:
        return tuple(sorted(os.sched_getaffinity(0)))
    for task in task_dir.iterdir():
        try:
            os.sched_setaffinity(int(task.name), wanted)
        except (OSError, ValueError):
            continue  # a thread that exited meanwhile, or a refusal: read back below
    return tuple(sorted(os.sched_getaffinity(0)))


class Actuators:
    """Holds the actuation in force; the worker thread calls `before_prefill`, `between_tokens`."""

    def __init__(
        self,
        allowed: Iterable[int] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.perf_counter,
        affinity: Callable[[Iterable[int]], tuple[int, ...]] = set_process_affinity,
    ) -> None:
        self.allowed = tuple(sorted(allowed if allowed is not None else os.sched_getaffinity(0)))
        self._sleep, self._clock, self._affinity = sleep, clock, affinity
        self._lock = threading.Lock()
        self.current: Actuation | None = None
        self.applied_cpus: tuple[int, ...] = self.allowed
        self._step_start: float | None = None
        self._phase = ""
        self.last_pause_s = 0.0
        self.extra_delay: Callable[[float], float] | None = None  # virtual phone: firmware slowdown
        self._tokens: deque[float] = deque(maxlen=4096)  # times decode steps finished (live tok/s)

    def set(self, actuation: Actuation | None) -> None:
        """Install the actuation used from the next token on (None = no governor: full allowed set)."""
        with self._lock:
            self.current = actuation

    def _pin(self, cpus: tuple[int, ...]) -> None:
        target = tuple(c for c in cpus if c in self.allowed) or self.allowed
        if target != self.applied_cpus:
            self.applied_cpus = self._affinity(target)
            if set(self.applied_cpus) != set(target):
                log.warning("affinity_refused", wanted=list(target), got=list(self.applied_cpus))

    def before_prefill(self) -> None:
        """Prefill is a short burst that sets TTFT: run it on the fastest set."""
        act = self.current
        self._pin(act.prefill_cpus if act is not None else self.allowed)
        self._phase = "prefill"
        self._step_start = None

    def tokens_per_second(self, window_s: float = 2.0) -> float:
        """Decode rate over the last window_s seconds (0 when nothing was decoded in it)."""
        now = self._clock()
        recent = [t for t in list(self._tokens) if now - t <= window_s]
        return len(recent) / window_s if recent else 0.0

    def between_tokens(self) -> None:
        """After each decode step: switch to the decode affinity once, then pace by the duty cycle."""
        now = self._clock()
        self._tokens.append(now)
        act = self.current
        if self._phase != "decode":
            self._pin(act.cpus if act is not None else self.allowed)
            self._phase = "decode"
        step = now - self._step_start if self._step_start is not None else 0.0
        pause = act.pause_s(step) if act is not None else 0.0
        if self.extra_delay is not None:
            pause += self.extra_delay(step)
        self.last_pause_s = pause
        if pause > 0:
            self._sleep(pause)
        self._step_start = self._clock()
