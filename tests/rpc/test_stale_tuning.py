"""Measured choices that go stale: contended trials are re-measured and never cached, and a choice
the live decode rate contradicts is re-measured at the next idle moment (core/contention.py, retune.py).

The machine is a fake whose contention the test controls: `Machine.others` cores held by other
processes (what a `/proc/stat` meter would show) and a fake engine that is slow at 2 threads while
they are held, as MNN is when one of its threads waits for a core.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from edgellm.client.commands.status import tuning as tuning_line
from edgellm.device.config import DaemonConfig
from edgellm.device.core import tuner
from edgellm.device.core.autotune import ThreadTrial, ThreadTuning, tune_threads
from edgellm.device.core.contention import CpuTimes, busy_seconds, judge
from edgellm.device.core.retune import RATIO, WINDOW, RateWatch
from edgellm.device.core.tuning_cache import TuningCache
from edgellm.device.governor.actuation import GovernorPolicy
from edgellm.device.rpc.server import start_server
from edgellm.device.rpc.wire import status_message
from edgellm.engine.artifact import Artifact, open_artifact
from edgellm.engine.base import Logits
from edgellm.engine.config import EngineConfig
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc
from tests.fakes.fake_engine import FakeEngine
from tests.rpc.conftest import channel_to

FAST_S, ONE_THREAD_S, SPOILED_S = 0.004, 0.008, 0.04  # seconds per forward


@dataclass
class Machine:
    """Other processes' load, as the test sets it; a meter that integrates it like /proc/stat does."""

    others: float = 0.0  # cores other processes hold now
    spoil_prefills: int = 0  # the next N prefills of a 2-thread engine run under 2 cores of others
    slow: bool = False  # every forward is slow (the machine got slower after the choice was measured)
    _busy: float = 0.0
    _last: float = field(default_factory=time.perf_counter)

    def read(self) -> CpuTimes:
        now = time.perf_counter()
        self._busy += self.others * (now - self._last)
        self._last = now
        return CpuTimes(now, 0.0, self._busy)


class MachineEngine(FakeEngine):
    """A fake engine fastest at 2 threads, slowed when the machine is contended or slow."""

    def __init__(self, artifact: Artifact, config: EngineConfig, machine: Machine) -> None:
        super().__init__(artifact, config, endless=True)
        self.machine = machine

    def prefill(self, ids: Sequence[int]) -> Logits:
        """Set this forward's speed from the machine's state, then the scripted prefill."""
        m = self.machine
        spoiled = self.config.threads == 2 and m.spoil_prefills > 0
        m.spoil_prefills -= 1 if spoiled else 0
        m.others = 2.0 if spoiled else 0.0
        fast = FAST_S if self.config.threads == 2 else ONE_THREAD_S
        self.step_s = SPOILED_S if spoiled or m.slow else fast
        return super().prefill(ids)


def engines(machine: Machine) -> Callable[[Artifact, EngineConfig], MachineEngine]:
    """An engine factory on `machine`."""
    return lambda artifact, config: MachineEngine(artifact, config, machine)


def test_the_rule_flags_others_on_the_needed_cores_and_disagreeing_repeats() -> None:
    a, b = CpuTimes(0.0, 1.0, 10.0), CpuTimes(1.0, 2.0, 12.8)  # 2.8 busy - 1.0 own = 1.8 cores of others
    assert judge(a, b, threads=2, cpus=2, repeats=(90, 91)).spoiled
    assert not judge(a, b, threads=1, cpus=4, repeats=(90, 91)).spoiled  # 3 spare cores hold them
    hidden = CpuTimes(1.0, 2.0, None)  # Android: /proc/stat unreadable, only the repeats count
    assert not judge(CpuTimes(0.0, 1.0, None), hidden, 2, 2, (90, 80)).spoiled
    assert "repeats disagree" in judge(CpuTimes(0.0, 1.0, None), hidden, 2, 2, (90, 4.3)).reason


def test_busy_seconds_reads_only_the_usable_cpus_of_a_proc_tree(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "stat").write_text(
        "cpu  900 0 100 5000 0 0 0 0 0 0\ncpu0 300 0 100 1000 50 0 0 0 0 0\ncpu1 600 0 0 4000 0 0 0 0 0 0\n"
    )
    hz = os.sysconf("SC_CLK_TCK")
    assert busy_seconds(frozenset({0}), tmp_path) == 400 / hz
    assert busy_seconds(frozenset({0, 1}), tmp_path) == 1000 / hz
    assert busy_seconds(frozenset({0}), tmp_path / "missing") is None


def test_a_trial_spoiled_once_is_measured_again_and_the_clean_pick_is_cached(
    fake_artifact: Path, tmp_path: Path
) -> None:
    machine = Machine(spoil_prefills=4)  # warm-up, the uncounted measure, the first timed attempt
    artifact = open_artifact(fake_artifact)
    got = tune_threads(
        engines(machine), artifact, EngineConfig(threads=1), (1, 2), meter=machine.read, cpus=2
    )
    assert got.threads == 2 and not got.contended and not got.recheck
    cache = TuningCache(tmp_path)
    cache.put("k", got)
    saved = cache.get("k")
    assert saved is not None and saved.threads == 2 and saved.measured_unix == got.measured_unix


def test_a_trial_contended_throughout_is_not_cached_and_asks_for_a_recheck(
    fake_artifact: Path, tmp_path: Path
) -> None:
    machine = Machine(spoil_prefills=1000)
    artifact = open_artifact(fake_artifact)
    got = tune_threads(
        engines(machine), artifact, EngineConfig(threads=1), (1, 2), meter=machine.read, cpus=2
    )
    two = next(t for t in got.trials if t.threads == 2)
    assert two.contended and got.contended and got.recheck == "contended trials"
    assert got.threads == 1  # it lost, contended: the pick is in doubt
    cache = TuningCache(tmp_path)
    cache.put("k", got)
    assert cache.get("k") is None  # a later start measures again instead of trusting it
    line = tuning_line(status_message_for(got))
    assert "(contended)" in line and "not cached" in line and "re-check due" in line


def test_a_contended_winner_is_kept_because_contention_only_slows_a_trial() -> None:
    won = ThreadTuning(2, (ThreadTrial(1, 40.0, 1.0), ThreadTrial(2, 90.0, 1.0, contended=True)))
    lost = ThreadTuning(1, (ThreadTrial(1, 40.0, 1.0), ThreadTrial(2, 4.3, 1.0, contended=True)))
    assert not won.contended and lost.contended


def status_message_for(t: ThreadTuning) -> device_pb2.ThreadTuning:
    return device_pb2.ThreadTuning(
        threads=t.threads,
        trials=[
            device_pb2.ThreadTrial(
                threads=x.threads, decode_tokens_per_second=x.decode_tokens_per_second, contended=x.contended
            )
            for x in t.trials
        ],
        seconds=t.seconds,
        measured_unix=t.measured_unix,
        recheck=t.recheck,
    )


def test_the_watch_needs_a_window_of_slow_comparable_requests() -> None:
    watch = RateWatch(100.0)
    slow = RATIO * 100 * 0.8
    assert not watch.observe(slow, tokens=8)  # too short to judge
    assert not watch.observe(slow, tokens=64, throttled=True)  # slowed by the governor on purpose
    assert not watch.observe(slow, tokens=64, constrained=True)  # token masks cost their own time
    for _ in range(WINDOW - 1):
        assert not watch.observe(slow, tokens=64)
    assert "live decode" in watch.observe(slow, tokens=64)
    for _ in range(WINDOW - 1):
        watch.observe(slow, tokens=64)
    assert not watch.observe(90.0, tokens=64)  # one fast request in the window: no pattern


def test_status_shows_the_choice_and_its_age() -> None:
    t = ThreadTuning(2, (ThreadTrial(1, 41.8, 200.0), ThreadTrial(2, 68.0, 300.0)), seconds=9.1, cached=True)
    msg = status_message_for(t)
    msg.measured_unix = 1000.0
    line = tuning_line(msg, now=1000.0 + 3 * 3600)
    assert line.startswith("autotuned 2 (decode 1: 41.8 tok/s, 2: 68.0 tok/s") and "measured 3 h ago" in line


async def test_a_choice_the_live_rate_contradicts_is_remeasured_when_idle_and_saved(
    fake_artifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine = Machine()
    # The daemon's meter reads this fake machine, not the host's /proc/stat (other jobs share it).
    monkeypatch.setattr(tuner, "proc_meter", lambda: machine.read)
    config = DaemonConfig.of(
        port=0,
        model=fake_artifact,
        data_dir=tmp_path,
        threads=1,
        autotune=True,
        draft_max=0,
        governor_policy=GovernorPolicy.OFF,
    )
    running = await start_server(config, engines(machine))
    core = running.core
    try:
        first = core.models.tuning
        assert first.trials and not first.recheck
        core.retune_idle_s = 3600.0  # no re-check yet: first let the requests show the slowdown
        machine.slow = True
        async with channel_to(running) as channel:
            stub = device_pb2_grpc.DeviceDaemonStub(channel)
            for _ in range(WINDOW):
                request = device_pb2.GenerateRequest(
                    messages=[common_pb2.ChatMessage(role="user", content="hi")], max_new_tokens=24
                )
                replies = [r async for r in stub.Generate(request)]
                assert replies[-1].stats.completion_tokens == 24
        assert core.models.tuning.recheck.startswith("live decode")
        assert "re-check due" in tuning_line(status_message(core.status()).thread_tuning)
        core.retune_idle_s = 0.05  # now idle: the background loop re-measures
        deadline = time.monotonic() + 60
        while core.models.tuning.measured_unix == first.measured_unix and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # polling the tuning, not a synchronisation sleep
        again = core.models.tuning
        assert again.measured_unix > first.measured_unix and not again.recheck and not again.cached
        assert again.decode_tokens_per_second < first.decode_tokens_per_second * RATIO
        saved = TuningCache(tmp_path).get(next(iter(TuningCache(tmp_path)._map.read())))
        assert saved is not None and saved.measured_unix == again.measured_unix
    finally:
        await running.stop(0)
