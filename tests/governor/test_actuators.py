"""Actuators with an injected clock, sleep and affinity function; the real affinity call on this host
(and its restore when an in-process daemon stops); ADPF and scaling_max_freq driven through the
actuators against the named fakes in fakes.py."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from edgellm.device.config import DaemonConfig
from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.actuators import BLEND_BLOCK, Actuators, set_process_affinity
from edgellm.device.governor.adpf import PerformanceHint
from edgellm.device.governor.cpufreq_caps import CpufreqCaps
from edgellm.device.rpc.server import start_server
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.fakes.fake_artifact import write_fake_artifact
from tests.fakes.fake_engine import FakeEngine
from tests.governor.fakes import FakeLibAndroid, fake_cpufreq
from tests.polling import apoll
from tests.rpc.conftest import channel_to


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


def blocks_on_blend(share: float, tokens: int) -> list[bool]:
    """Whether each block of BLEND_BLOCK decode tokens ran on the blend's cores."""
    clock = FakeClock()
    act = Actuators(allowed=range(8), sleep=clock.sleep, clock=clock, affinity=lambda c: tuple(sorted(c)))
    act.set(Actuation(4, (0, 1), (4, 5, 6, 7), blend_cpus=(4, 5), blend=share))
    act.before_prefill()
    per_token = []
    for _ in range(tokens):
        clock.t += 0.05
        act.between_tokens()
        per_token.append(act.applied_cpus == (4, 5))
    return per_token[::BLEND_BLOCK]


def test_a_blend_is_spread_evenly_so_no_window_of_blocks_strays_a_whole_block_from_its_share() -> None:
    for share in (0.1, 0.25, 0.4, 0.5, 0.8):
        blocks = blocks_on_blend(share, 40 * BLEND_BLOCK)
        for n in (3, 5, 10):
            for i in range(len(blocks) - n + 1):
                assert abs(sum(blocks[i : i + n]) - share * n) < 1.0 + 1e-9, (share, n, i)


def test_a_capped_and_an_uncapped_rung_on_the_same_cores_blend_through_scaling_max_freq(
    tmp_path: Path,
) -> None:
    fake_cpufreq(tmp_path)
    writes: list[int] = []
    big = tmp_path / "sys/devices/system/cpu/cpu2/cpufreq/scaling_max_freq"

    def write(path: Path, text: str) -> None:
        path.write_text(text)
        if path == big:
            writes.append(int(text))

    caps = CpufreqCaps(tmp_path, write=write)
    clock = FakeClock()
    pinned: list[tuple[int, ...]] = []

    def affinity(cpus: Iterable[int]) -> tuple[int, ...]:
        pinned.append(tuple(sorted(cpus)))
        return pinned[-1]

    act = Actuators(allowed=range(4), sleep=clock.sleep, clock=clock, affinity=affinity, caps=caps)
    writes.clear()  # the adapter's own write-back probe
    act.set(Actuation(2, (2, 3), (2, 3), blend_cpus=(2, 3), blend=0.5, freq_cap=1.0, blend_freq_cap=0.7))
    act.before_prefill()
    for _ in range(8 * BLEND_BLOCK):
        clock.t += 0.05
        act.between_tokens()
    assert pinned == [(2, 3)]  # the cores never change: only the clock does
    per_block = writes[1:]  # after set()'s own write at the rung's cap
    assert writes[0] == 3_000_000 and len(per_block) == 8
    assert sorted(set(per_block)) == [2_100_000, 3_000_000]
    assert all(a != b for a, b in itertools.pairwise(per_block))  # half and half, alternating
    act.set(None)
    assert big.read_text().strip() == "3000000"


def test_adpf_through_the_actuators_opens_one_session_and_follows_the_paced_period() -> None:
    lib = FakeLibAndroid()
    clock = FakeClock()
    act = Actuators(
        allowed=range(8),
        sleep=clock.sleep,
        clock=clock,
        affinity=lambda c: tuple(c),
        hint=PerformanceHint(lib),
        thread_ids=lambda: [11, 12, 13],
    )
    act.set(Actuation(4, (0, 1), (4, 5, 6, 7), duty=0.5))
    act.before_prefill()
    act.between_tokens()  # the first token closes prefill: no decode step to report yet
    for _ in range(5):
        clock.t += 0.02  # a 20 ms decode step, then 20 ms asleep (duty 0.5)
        act.between_tokens()
    act.set(Actuation(4, (0, 1), (4, 5, 6, 7)))  # unpaced: the target is the step itself
    for _ in range(3):
        clock.t += 0.02
        act.between_tokens()
    names = [n for n, _ in lib.calls]
    assert names.count("APerformanceHint_createSession") == 1
    _, created = next(c for c in lib.calls if c[0] == "APerformanceHint_createSession")
    assert list(created[1]) == [11, 12, 13] and created[3] == 40_000_000  # step / duty
    targets = [a[1] for n, a in lib.calls if n == "APerformanceHint_updateTargetWorkDuration"]
    assert [round(t, -3) for t in targets] == [20_000_000]  # one update when pacing stopped
    reports = [a[1] for n, a in lib.calls if n == "APerformanceHint_reportActualWorkDuration"]
    assert len(reports) == 8 and all(abs(r - 20_000_000) < 1_000 for r in reports)  # the work, not the sleep


def test_a_refused_adpf_session_is_not_asked_again_and_pacing_goes_on() -> None:
    lib = FakeLibAndroid(session=0)  # createSession returns NULL: the phone refuses hint sessions
    clock = FakeClock()
    act = Actuators(
        allowed=range(8),
        sleep=clock.sleep,
        clock=clock,
        affinity=lambda c: tuple(c),
        hint=PerformanceHint(lib),
        thread_ids=lambda: [11],
    )
    act.set(Actuation(4, (0, 1), (4, 5, 6, 7), duty=0.5))
    act.before_prefill()
    act.between_tokens()
    for _ in range(5):
        clock.t += 0.02
        act.between_tokens()
    assert [n for n, _ in lib.calls].count("APerformanceHint_createSession") == 1
    assert act.hint is None
    assert len(clock.slept) == 5 and all(abs(s - 0.02) < 1e-9 for s in clock.slept)


def test_restore_gives_back_the_allowed_set_and_stops_pinning() -> None:
    clock = FakeClock()
    calls: list[tuple[int, ...]] = []

    def affinity(cpus: Iterable[int]) -> tuple[int, ...]:
        calls.append(tuple(cpus))
        return tuple(cpus)

    act = Actuators(allowed=range(4), sleep=clock.sleep, clock=clock, affinity=affinity)
    act.set(Actuation(1, (3,), (2, 3), label="one"))
    act.before_prefill()
    act.between_tokens()
    assert calls == [(2, 3), (3,)]
    act.restore()
    assert calls[-1] == (0, 1, 2, 3) and act.applied_cpus == (0, 1, 2, 3)
    act.before_prefill()  # a token still in flight when the governor stopped
    act.between_tokens()
    assert calls[-1] == (0, 1, 2, 3) and len(calls) == 3


def thread_affinities() -> dict[int, set[int]]:
    """The affinity of every thread of this process (MNN's and gRPC's included)."""
    got = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            got[int(task.name)] = os.sched_getaffinity(int(task.name))
        except OSError:
            continue  # a thread that exited meanwhile
    return got


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two usable CPUs")
async def test_an_in_process_daemon_pins_its_process_only_while_it_generates(tmp_path: Path) -> None:
    """A 1-thread ladder pins the whole process to one core during a request; when the engine goes
    idle every thread gets the affinity back, and a stopped daemon leaves it so."""
    before = os.sched_getaffinity(0)
    artifact = write_fake_artifact(tmp_path / "artifact")
    running = await start_server(
        DaemonConfig.of(
            port=0, model=artifact, data_dir=tmp_path / "data", threads=1, insecure_loopback=True
        ),
        FakeEngine.factory(endless=True, step_s=0.002),
    )
    try:
        async with channel_to(running) as channel:
            stub = device_pb2_grpc.DeviceDaemonStub(channel)
            call = stub.Generate(device_pb2.GenerateRequest(prompt="hi", max_new_tokens=2000))
            for _ in range(3):
                await call.read()
            pinned = os.sched_getaffinity(0)
            call.cancel()
            # The worker gives the cores back when the cancelled request ends.
            await apoll(lambda: all(c == before for c in thread_affinities().values()), "affinity back")
            request = device_pb2.GenerateRequest(prompt="hi", max_new_tokens=4)
            replies = [r async for r in stub.Generate(request)]
            assert replies[-1].stats.completion_tokens == 4
            await apoll(lambda: all(c == before for c in thread_affinities().values()), "affinity back")
    finally:
        await running.stop(0)
    assert pinned < before  # the governor really pinned this process while it generated
    assert all(cpus == before for cpus in thread_affinities().values())
