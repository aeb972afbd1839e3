"""Apply an Actuation to the real process: thread affinity (read back), pacing between steps, a blend
of two rungs interleaved in short blocks of tokens, and where the phone allows, an ADPF hint
session and scaling_max_freq caps.

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
from edgellm.device.governor.adpf import PerformanceHint
from edgellm.device.governor.cpufreq_caps import CpufreqCaps

log = get_logger(__name__)

BLEND_BLOCK = 4  # tokens per block of a blend: one affinity change per ≥ 4 tokens (~0.1 ms each)


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


def _process_threads(task_dir: Path = Path("/proc/self/task")) -> list[int]:
    """Thread ids of this process (MNN's workers included) for an ADPF session."""
    try:
        return sorted(int(t.name) for t in task_dir.iterdir())
    except OSError:
        return [threading.get_native_id()]


class Actuators:
    """Holds the actuation in force; the worker thread calls `before_prefill`, `between_tokens`.

    `allowed` defaults to the process's affinity at construction. Cores are pinned only while a
    request runs: `release` gives every thread the allowed set when the engine goes idle, `restore`
    when the governor stops (and pins no more). Why: affinity is per process, and an in-process
    daemon (a test's, an embedding app's) would otherwise hold its host on one rung's cores.
    """

    def __init__(
        self,
        allowed: Iterable[int] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.perf_counter,
        affinity: Callable[[Iterable[int]], tuple[int, ...]] = set_process_affinity,
        hint: PerformanceHint | None = None,
        caps: CpufreqCaps | None = None,
        thread_ids: Callable[[], list[int]] | None = None,
        extra_delay: Callable[[Actuation | None, float], float] | None = None,
    ) -> None:
        self.allowed = tuple(sorted(allowed if allowed is not None else os.sched_getaffinity(0)))
        self._sleep, self._clock, self._affinity = sleep, clock, affinity
        self._lock = threading.Lock()
        self._pin_lock = threading.Lock()  # the worker pins; the event loop restores at stop
        self._restored = False
        self.current: Actuation | None = None
        self.applied_cpus: tuple[int, ...] = self.allowed
        self._step_start: float | None = None
        self._phase = ""
        self.last_pause_s = 0.0
        # Seconds to add after a decode step at an actuation (a virtual phone's firmware slowdown).
        self.extra_delay = extra_delay
        self._tokens: deque[float] = deque(maxlen=4096)  # times decode steps finished (live tok/s)
        self.hint = hint if hint is not None and hint.available else None
        self.caps = caps if caps is not None and caps.available else None
        self._thread_ids = thread_ids or _process_threads
        self._decoded = 0
        self._blend_acc = 0.0
        self.last_prefill: float | None = None  # clock time of the last prefill burst

    def set(self, actuation: Actuation | None) -> None:
        """Install the actuation used from the next token on (None = no governor: full allowed set)."""
        with self._lock:
            self.current = actuation
        if self.caps is not None:
            act = actuation
            self.caps.cap((*act.cpus, *act.blend_cpus) if act else (), act.freq_cap if act else 1.0)

    def _pin(self, cpus: tuple[int, ...]) -> None:
        target = tuple(c for c in cpus if c in self.allowed) or self.allowed
        with self._pin_lock:
            # After restore() a token still being decoded must not pin the process again.
            if self._restored or target == self.applied_cpus:
                return
            self.applied_cpus = self._affinity(target)
        if set(self.applied_cpus) != set(target):
            log.warning("affinity_refused", wanted=list(target), got=list(self.applied_cpus))

    def release(self, stop: bool = False) -> None:
        """Give every thread the allowed set (the affinity at start) until the next request pins."""
        with self._pin_lock:
            self._restored = self._restored or stop
            if self.applied_cpus != self.allowed:
                self.applied_cpus = self._affinity(self.allowed)
        self._phase = ""  # the next token pins its decode cores again
        if set(self.applied_cpus) != set(self.allowed):
            log.warning("affinity_not_restored", wanted=list(self.allowed), got=list(self.applied_cpus))

    def restore(self) -> None:
        """The governor stops: give the allowed set back and pin no more."""
        self.release(stop=True)

    def before_prefill(self) -> None:
        """Prefill is a short burst that sets TTFT: run it on the fastest set."""
        act = self.current
        self._pin(act.prefill_cpus if act is not None else self.allowed)
        self._phase = "prefill"
        self._step_start = None
        self.last_prefill = self._clock()

    def tokens_per_second(self, window_s: float = 2.0) -> float:
        """Decode rate over the last window_s seconds (0 when nothing was decoded in it)."""
        now = self._clock()
        recent = [t for t in list(self._tokens) if now - t <= window_s]
        return len(recent) / window_s if recent else 0.0

    def prefill_age_s(self) -> float | None:
        """Seconds since the last prefill burst began (None before the first)."""
        return None if self.last_prefill is None else self._clock() - self.last_prefill

    def _decode_cpus(self, act: Actuation) -> tuple[int, ...]:
        """The cores for the next block: a first-order sigma-delta spreads the blend's share evenly."""
        if act.blend <= 0 or not act.blend_cpus:
            return act.cpus
        self._blend_acc += act.blend
        on_blend = self._blend_acc >= 1.0
        if on_blend:
            self._blend_acc -= 1.0
        if self.caps is not None and act.freq_cap != act.blend_freq_cap:
            self.caps.cap((*act.cpus, *act.blend_cpus), act.blend_freq_cap if on_blend else act.freq_cap)
        return act.blend_cpus if on_blend else act.cpus

    def between_tokens(self) -> None:
        """After each decode step: choose the decode cores (per block for a blend), then pace by the duty."""
        now = self._clock()
        self._tokens.append(now)
        act = self.current
        if self._repin_due(act):
            self._pin(self._decode_cpus(act) if act is not None else self.allowed)
            self._phase = "decode"
        self._decoded += 1
        step = now - self._step_start if self._step_start is not None else 0.0
        pause = self._pause_s(act, step)
        self._report_hint(step, pause)
        self.last_pause_s = pause
        if pause > 0:
            self._sleep(pause)
        self._step_start = self._clock()

    def _repin_due(self, act: Actuation | None) -> bool:
        """Whether to pin now: the first decode token, or a blend's block boundary."""
        if self._phase != "decode":
            return True
        return act is not None and act.blend > 0 and self._decoded % BLEND_BLOCK == 0

    def _pause_s(self, act: Actuation | None, step: float) -> float:
        """The sleep after a decode step of step seconds: the actuation's pacing plus any extra delay."""
        pause = act.pause_s(step) if act is not None else 0.0
        if self.extra_delay is not None:
            pause += self.extra_delay(act, step)
        return pause

    def _report_hint(self, step: float, pause: float) -> None:
        """Tell the ADPF session the paced period and the work it took (opening it on first use)."""
        if self.hint is None or step <= 0:
            return
        if not self.hint.live and not self.hint.open(self._thread_ids(), step + pause):
            self.hint = None  # refused: do not ask again
            return
        self.hint.target(step + pause)  # the paced period: the scheduler may lower clocks
        self.hint.report(step)
