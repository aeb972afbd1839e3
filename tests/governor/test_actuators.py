"""Actuators with an injected clock, sleep and affinity function; the real affinity call on this host."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.actuators import BLEND_BLOCK, Actuators, set_process_affinity
from edgellm.device.governor.adpf import PerformanceHint


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def test_prefill_on_fast_cores_decode_on_rung_and_duty_pacing() -> None:
    clock = FakeClock()
    pinned: list[tuple[int, ...]] = []

    def affinity(cpus: Iterable[int]) -> tuple[int, ...]:
        got = tuple(sorted(c for c in cpus if c != 7))  # the OS refuses the prime core
        pinned.append(got)
        return got

    act = Actuators(allowed=range(8), sleep=clock.sleep, clock=clock, affinity=affinity)
    act.set(Actuation(4, (2, 3), (4, 5, 6, 7), duty=0.5, pacing_ms=0.0))
    act.before_prefill()
    assert list(pinned[-1]) == [4, 5, 6]  # read back: 7 refused
    clock.t += 0.1  # prefill
    act.between_tokens()  # first call switches to the decode set
    assert list(pinned[-1]) == [2, 3]
    clock.t += 0.02  # one 20 ms decode step
    act.between_tokens()
    assert abs(clock.slept[-1] - 0.02) < 1e-9  # duty 0.5: sleep as long as the step took
    act.set(Actuation(4, (2, 3), (4, 5, 6, 7), pacing_ms=15.0))
    clock.t += 0.01
    act.between_tokens()
    assert abs(clock.slept[-1] - 0.015) < 1e-9
    assert act.tokens_per_second(window_s=10.0) > 0


def test_no_governor_means_no_sleep_and_no_pinning() -> None:
    clock = FakeClock()
    calls: list[tuple[int, ...]] = []

    def affinity(cpus: Iterable[int]) -> tuple[int, ...]:
        calls.append(tuple(cpus))
        return (0, 1)

    act = Actuators(allowed=(0, 1), sleep=clock.sleep, clock=clock, affinity=affinity)
    act.before_prefill()
    act.between_tokens()
    act.between_tokens()
    assert clock.slept == [] and calls == []


def test_real_affinity_is_read_back() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    try:
        got = set_process_affinity([allowed[0]])
        assert got == (allowed[0],)
    finally:
        set_process_affinity(allowed)
    assert sorted(os.sched_getaffinity(0)) == allowed


def test_a_blend_runs_its_share_of_tokens_on_the_other_rung_in_blocks() -> None:
    clock = FakeClock()
    pinned: list[tuple[int, ...]] = []

    def affinity(cpus: Iterable[int]) -> tuple[int, ...]:
        pinned.append(tuple(sorted(cpus)))
        return pinned[-1]

    act = Actuators(allowed=range(8), sleep=clock.sleep, clock=clock, affinity=affinity)
    act.set(Actuation(4, (0, 1), (4, 5, 6, 7), blend_cpus=(3, 4, 5, 6), blend=0.25))
    act.before_prefill()
    on_blend = 0
    for _ in range(400):
        clock.t += 0.05
        act.between_tokens()
        on_blend += act.applied_cpus == (3, 4, 5, 6)
    assert on_blend == 100  # a quarter of the tokens, exactly
    assert len(pinned) <= 2 + 2 * 400 // BLEND_BLOCK // 4 + 2  # one switch per block at most


class FakeHint(PerformanceHint):
    """A PerformanceHint whose session is a list (the real one needs libandroid.so)."""

    def __init__(self) -> None:
        self.reason, self._open = "", False
        self.events: list[tuple[str, float]] = []

    @property
    def available(self) -> bool:
        return True

    @property
    def live(self) -> bool:
        return self._open

    def open(self, thread_ids: Sequence[int], target_s: float) -> bool:
        self._open = True
        self.events.append(("open", target_s))
        return True

    def target(self, seconds: float) -> None:
        self.events.append(("target", seconds))

    def report(self, seconds: float) -> None:
        self.events.append(("report", seconds))


def test_paced_decode_tells_adpf_the_paced_period_and_the_real_step() -> None:
    clock = FakeClock()
    hint = FakeHint()
    act = Actuators(
        allowed=range(8),
        sleep=clock.sleep,
        clock=clock,
        affinity=lambda c: tuple(c),
        hint=hint,
        thread_ids=lambda: [1, 2],
    )
    act.set(Actuation(4, (0, 1), (4, 5, 6, 7), duty=0.5))
    act.before_prefill()
    act.between_tokens()
    clock.t += 0.02
    act.between_tokens()
    assert ("report", 0.02) in [(e[0], round(e[1], 6)) for e in hint.events]
    assert ("target", 0.04) in [(e[0], round(e[1], 6)) for e in hint.events]  # step / duty
    age = act.prefill_age_s()
    assert age is not None and age >= 0.02
