"""Load-time thread autotune over a real gRPC server: a fake engine whose speed depends on its threads."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from edgellm.client.commands.status import tuning
from edgellm.device.config import DaemonConfig
from edgellm.device.core import tuner
from edgellm.device.core.autotune import ThreadTrial, ThreadTuning, candidate_threads
from edgellm.device.core.contention import CpuTimes
from edgellm.device.core.tuning_cache import CostsCache, JsonMap, TuningCache, costs_key, tuning_key
from edgellm.device.decoding import measure_forward_costs
from edgellm.device.rpc.server import start_server
from edgellm.device.rpc.wire import status_message
from edgellm.engine.artifact import Artifact
from edgellm.engine.config import EngineConfig
from edgellm.engine.costs import ForwardCosts
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.fakes.fake_engine import FakeEngine
from tests.rpc.conftest import channel_to

FASTEST = 2
# This process's CPUs before any test ran (collection time). An in-process governor pins the process
# only while its engine generates and gives the cores back when idle or stopped
# (tests/governor/test_actuators.py), so the tuner sees all of them, even beside the session daemon.
CPUS_AT_START = len(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The contention meter sees no other process: on a shared host, others' jobs would (rightly)
    mark trials contended and keep them out of the cache these tests check (tests/rpc/test_stale_tuning.py
    tests the contention rule itself)."""
    monkeypatch.setattr(tuner, "proc_meter", lambda: lambda: CpuTimes(time.perf_counter(), 0.0, None))


def speed_by_threads(artifact: Artifact, config: EngineConfig) -> FakeEngine:
    """A fake engine fastest at FASTEST threads (1 ms a forward, else 20 ms: a gap no host load hides)."""
    return FakeEngine(artifact, config, endless=True, step_s=0.001 if config.threads == FASTEST else 0.02)


async def test_autotune_loads_with_the_fastest_thread_count_and_reports_it(
    fake_artifact: Path, tmp_path: Path
) -> None:
    config = DaemonConfig.of(port=0, model=fake_artifact, data_dir=tmp_path, threads=1, autotune=True)
    running = await start_server(config, speed_by_threads)
    try:
        async with channel_to(running) as channel:
            stub = device_pb2_grpc.DeviceDaemonStub(channel)
            st = await stub.GetStatus(device_pb2.GetStatusRequest())
            t = st.thread_tuning
            # Candidates are 1..the CPUs this process may use (at most 8).
            assert [x.threads for x in t.trials] == list(candidate_threads(CPUS_AT_START))
            assert t.seconds > 0 and not t.pinned
            # The pick is the measured best. Why not assert FASTEST itself: the trials are timed
            # on the wall clock, and a loaded CI host can invert even a 20x gap once in a while.
            best = max(t.trials, key=lambda x: x.decode_tokens_per_second)
            pick = best.threads
            assert st.threads == pick and t.threads == pick and best.prefill_tokens_per_second > 0
            assert st.governor.threads == pick  # the governor's ladder starts from the pick
            assert f"autotuned {pick}" in tuning(t)
            loaded = running.core.models.loaded
            assert loaded is not None and isinstance(loaded.engine, FakeEngine)
            assert loaded.engine.config.threads == pick
            other = 2 if pick == 1 else 1  # a change: setting the same count is a no-op
            st = await stub.UpdateConfig(device_pb2.UpdateConfigRequest(threads=other))
            t = st.thread_tuning
            assert st.threads == other and t.pinned and f"pinned {other}" in tuning(t)
    finally:
        await running.stop(0)


async def test_without_autotune_the_configured_threads_are_pinned(
    fake_artifact: Path, tmp_path: Path
) -> None:
    running = await start_server(
        DaemonConfig.of(port=0, model=fake_artifact, data_dir=tmp_path), speed_by_threads
    )
    try:
        st = running.core.status()
        assert st.threads == 2 and st.thread_tuning.pinned and not st.thread_tuning.trials
    finally:
        await running.stop(0)


async def test_a_restart_reuses_the_pick_measured_for_the_same_artifact_and_cpus(
    fake_artifact: Path, tmp_path: Path
) -> None:
    """The pick is saved per (artifact, CPU set) in the data dir; the next start loads once, no trials."""
    loads: list[int] = []

    def counting(artifact: Artifact, config: EngineConfig) -> FakeEngine:
        loads.append(config.threads)
        return speed_by_threads(artifact, config)

    config = DaemonConfig.of(port=0, model=fake_artifact, data_dir=tmp_path, threads=1, autotune=True)
    first = await start_server(config, counting)
    measured = first.core.status().thread_tuning
    await first.stop(0)
    assert len(loads) == len(measured.trials) + 1 and not measured.cached
    loads.clear()
    second = await start_server(config, counting)
    try:
        t = second.core.status().thread_tuning
        assert loads == [measured.threads]  # the final load only
        assert t.cached and t.threads == measured.threads and t.trials == measured.trials
        assert "earlier start" in tuning(status_message(second.core.status()).thread_tuning)
    finally:
        await second.stop(0)


def test_a_damaged_tuning_cache_is_ignored(tmp_path: Path) -> None:
    cache = TuningCache(tmp_path)
    (tmp_path / "autotune.json").write_text("{not json")
    assert cache.get("k") is None
    cache.put("k", ThreadTuning(2, (ThreadTrial(2, 10.0, 100.0),), seconds=1.5))
    got = cache.get("k")
    assert (
        got is not None and got.threads == 2 and got.cached and got.trials[0].decode_tokens_per_second == 10.0
    )
    assert (
        tuning_key("a", frozenset({0, 1}))
        != tuning_key("a", frozenset({0}))
        != tuning_key("b", frozenset({0}))
    )


async def test_a_restart_reuses_the_forward_costs_timed_for_the_same_settings(
    fake_artifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forward costs are timed once per (artifact, CPUs, engine settings): a restart does not
    spend its load time timing them again (they no longer decide draft lengths: the restart test
    of a `fast` answer is tests/device/test_speculation_restart.py)."""
    timed: list[int] = []
    measure = measure_forward_costs

    def counting(engine: FakeEngine, costs: ForwardCosts, prompt: list[int], repeats: int = 5) -> None:
        timed.append(engine.config.threads)
        measure(engine, costs, prompt, repeats)

    monkeypatch.setattr(tuner, "measure_forward_costs", counting)
    config = DaemonConfig.of(port=0, model=fake_artifact, data_dir=tmp_path, threads=1, draft_max=8)
    first = await start_server(config, speed_by_threads)
    loaded = first.core.models.loaded
    assert loaded is not None
    measured = loaded.cache.costs.seconds
    await first.stop(0)
    assert timed == [1] and set(measured) == {1, 2, 3, 5, 9}
    second = await start_server(config, speed_by_threads)
    try:
        loaded = second.core.models.loaded
        assert loaded is not None and loaded.cache.costs.seconds == measured
        assert timed == [1]  # not timed again
    finally:
        await second.stop(0)
    third = await start_server(config.with_settings(threads=2), speed_by_threads)
    await third.stop(0)
    assert timed == [1, 2]  # other settings, another measurement


def test_forward_costs_keys_and_damaged_entries(tmp_path: Path) -> None:
    one, two = EngineConfig(threads=1, draft_max=8), EngineConfig(threads=2, draft_max=8)
    assert costs_key("k", one) != costs_key("k", two) != costs_key("k", replace(two, precision="high"))
    cache = CostsCache(tmp_path)
    (tmp_path / "forward_costs.json").write_text("[1, 2")
    assert cache.get("k") is None
    cache.put("k", ForwardCosts.fixed({1: 0.01, 2: 0.012}))
    got = cache.get("k")
    assert got is not None and got.seconds == {1: 0.01, 2: 0.012}
    for bad in ({"1": "fast"}, {"2": 0.01}, {"1": 0.0}, {"1": 0.01, "9": -1.0}, "x"):
        JsonMap(cache.path).put("bad", bad)  # what a hand-edited file could hold
        assert cache.get("bad") is None
