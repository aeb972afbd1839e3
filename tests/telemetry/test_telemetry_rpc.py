"""StreamTelemetry, UpdateConfig and the actuators against the real daemon and the real model.

UpdateConfig's validation is daemon logic, tested on the fake engine (tests/rpc/test_control.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from edgellm.device.config import DaemonConfig
from edgellm.device.governor.actuation import Actuation, GovernorPolicy
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.platforms import choose_platform
from edgellm.sim.platform import VirtualPhone
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.polling import apoll

# The generated stubs type the sync API; the aio channel's calls are awaitable/async-iterable.
Stub = Any


def prompt(n: int) -> device_pb2.GenerateRequest:
    # A long greedy continuation with no stop token in sight: the decode length is what we ask for.
    return device_pb2.GenerateRequest(prompt="1, 2, 3, 4, 5, 6, 7, 8,", max_new_tokens=n)


async def decode_tps(stub: Stub, n: int = 40) -> float:
    last = [r async for r in stub.Generate(prompt(n))][-1]
    assert last.stats.completion_tokens >= n // 2
    return float(last.stats.decode_tokens_per_second)


def cpu_ticks_by_thread() -> dict[int, int]:
    """utime + stime (clock ticks) of every thread of this process, from /proc/self/task/*/stat."""
    ticks = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a thread that exited meanwhile
        ticks[int(task.name)] = int(fields[11]) + int(fields[12])
    return ticks


async def decode_cpu_ticks(stub: Stub, n: int = 40) -> tuple[int, int]:
    """CPU ticks of the busiest and the second-busiest thread over one n-token generation."""
    before = cpu_ticks_by_thread()
    await decode_tps(stub, n)
    after = cpu_ticks_by_thread()
    busiest, second = sorted((t - before.get(tid, 0) for tid, t in after.items()), reverse=True)[:2]
    return busiest, second


async def test_stream_telemetry_samples_and_cancel(daemon_stub: Stub) -> None:
    call = daemon_stub.StreamTelemetry(device_pb2.StreamTelemetryRequest(interval_ms=100))
    samples = []
    async for s in call:
        samples.append(s)
        if len(samples) == 3:
            call.cancel()
            break
    assert len(samples) == 3
    first, last = samples[0], samples[-1]
    assert last.unix_time > first.unix_time
    assert first.mem_total_bytes > 0 and first.rss_bytes > 0 and first.rss_peak_bytes >= first.rss_bytes
    assert first.process_cpu_seconds > 0
    assert first.governor.policy == "thermal" and first.governor.setpoint_c > 0
    assert first.engine_state in (device_pb2.ENGINE_STATE_IDLE, device_pb2.ENGINE_STATE_DECODE)
    with pytest.raises(grpc.aio.AioRpcError):
        await daemon_stub.StreamTelemetry(device_pb2.StreamTelemetryRequest(interval_ms=10)).read()


async def test_telemetry_during_generation_shows_live_speed(
    daemon_stub: Stub,
) -> None:
    gen = asyncio.create_task(decode_tps(daemon_stub, 160))
    call = daemon_stub.StreamTelemetry(device_pb2.StreamTelemetryRequest(interval_ms=100))
    decoding = []
    async for s in call:
        if s.engine_state == device_pb2.ENGINE_STATE_DECODE and s.tokens_per_second > 0:
            decoding.append(s)
        if gen.done() or len(decoding) >= 3:
            call.cancel()
            break
    await gen
    assert decoding, "no sample saw the engine decoding"


async def test_pacing_slows_decode_and_threads_change_how_many_threads_mnn_computes_on(
    daemon_stub: Stub,
) -> None:
    assert await decode_tps(daemon_stub) > 0
    st = await daemon_stub.UpdateConfig(device_pb2.UpdateConfigRequest(pacing_ms=20.0))
    assert st.governor.policy == "pinned"
    last = [r async for r in daemon_stub.Generate(prompt(40))][-1]
    s = last.stats
    # Every decode step was followed by a 20 ms pause, whatever the machine's load: the decode
    # phase took at least that long (a speed ratio against an unpaced run flaked on a busy box).
    assert s.total_ms - s.ttft_ms >= 0.95 * 20.0 * (s.completion_tokens - 1)
    assert s.decode_tokens_per_second < 1000.0 / 20.0
    st = await daemon_stub.UpdateConfig(
        device_pb2.UpdateConfigRequest(pacing_ms=0.0, governor_policy="thermal")
    )
    assert st.governor.policy == "thermal"
    # threads: MNN applies thread_num only when the runtime is rebuilt, so this reloads the model.
    # What changes is counted in CPU time per OS thread, not timed: with 2 threads MNN's pool
    # thread computes beside the engine worker (measured 24 vs 34 ticks over 40 tokens), with 1
    # the second-busiest thread is near idle (1-3 vs 45). Speeds: bench/measure_threads.py.
    st = await daemon_stub.UpdateConfig(device_pb2.UpdateConfigRequest(threads=1))
    assert st.threads == 1 and st.governor.threads == 1
    busiest, second = await decode_cpu_ticks(daemon_stub)
    assert second < 0.25 * busiest, (busiest, second)
    st = await daemon_stub.UpdateConfig(device_pb2.UpdateConfigRequest(threads=2))
    assert st.threads == 2
    busiest, second = await decode_cpu_ticks(daemon_stub)
    assert second > 0.4 * busiest, (busiest, second)


@pytest.fixture
async def virtual_daemon(tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    config = DaemonConfig.of(
        port=0,
        data_dir=tmp_path,
        virtual_phone="sd8gen3",
        virtual_phone_time_scale=120.0,
        governor_period_s=0.1,
        insecure_loopback=True,
    )
    running = await start_server(config, platform=choose_platform(config))
    yield running
    await running.stop(0)


async def test_virtual_phone_writes_sysfs_the_readers_read(virtual_daemon: RunningDaemon) -> None:
    gov = virtual_daemon.core.governor
    platform = gov.platform
    assert isinstance(platform, VirtualPhone)
    assert gov.setpoint_c == pytest.approx(40.5 - gov.config.margin_c)  # first skin trip of the fake tree
    assert [r.label for r in gov.ladder] == ["fastest", "middle", "middle-half", "little"]
    assert gov.ladder[0].cpus == (4, 5, 6, 7)
    # A few governor periods: the plant advances on the scaled clock.
    await apoll(lambda: platform.phone.sim_seconds > 0, "the plant advancing")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{virtual_daemon.port}") as ch:
        stub: Stub = device_pb2_grpc.DeviceDaemonStub(ch)
        call = stub.StreamTelemetry(device_pb2.StreamTelemetryRequest(interval_ms=100))
        sample = await call.read()
        call.cancel()
    kinds = {z.kind for z in sample.zones}
    assert {"cpu", "skin", "battery"} <= kinds
    assert sample.HasField("skin_celsius") and 20.0 < sample.skin_celsius < 60.0
    assert len(sample.cores) == 8 and max(c.max_khz for c in sample.cores) == 3300000
    assert platform.phone.sim_seconds > 0


async def test_virtual_phone_firmware_slows_the_real_engine(default_artifact: Path, tmp_path: Path) -> None:
    config = DaemonConfig.of(
        port=0,
        model=default_artifact,
        data_dir=tmp_path,
        virtual_phone="sd8gen3",
        governor_policy=GovernorPolicy.OFF,
        virtual_phone_time_scale=0.001,  # hold the plant where the test puts it
        insecure_loopback=True,
    )
    platform = choose_platform(config)
    assert isinstance(platform, VirtualPhone)
    running = await start_server(config, platform=platform)
    # The firmware's slowdown reaches the real engine as a pause after each decode step of
    # (slowdown - 1) x that step; recorded here, not timed (the hot/cool speed ratio is a wall-clock
    # figure: bench/bench_thermal.py and docs/governor.md).
    acts = running.core.governor.actuators
    firmware = acts.extra_delay
    assert firmware is not None
    delays: list[tuple[float, float]] = []

    def recorded(act: Actuation | None, step: float) -> float:
        delays.append((step, firmware(act, step)))
        return delays[-1][1]

    acts.extra_delay = recorded
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub: Stub = device_pb2_grpc.DeviceDaemonStub(ch)
            await decode_tps(stub)
            assert delays and all(delay == 0 for _, delay in delays)  # cool: no firmware level
            delays.clear()
            plant = platform.phone.plant
            plant.skin_c = 60.0  # past every trip point: all firmware levels engage
            plant.update_firmware()
            assert plant.level == len(plant.p.firmware.levels)
            # The deepest level cuts sd8gen3 decode to about a third: the physics says so exactly,
            slowdown = platform.phone.slowdown(None)
            last = [r async for r in stub.Generate(prompt(40))][-1]
    finally:
        await running.stop(0)
    assert slowdown > 2.5
    # and the real engine is stretched: every decode step after the first paused for its share
    paused = [(step, delay) for step, delay in delays if step > 0]
    # (one step per token, less the drafted tokens a verify step accepted with it),
    assert len(paused) >= last.stats.completion_tokens - last.stats.accepted_draft_tokens - 2
    assert all(delay >= step * (slowdown - 1) * (1 - 1e-9) for step, delay in paused)
    # and those pauses are in the decode time the client was told (sleeping only ever runs long).
    assert last.stats.total_ms - last.stats.ttft_ms >= 1000 * sum(delay for _, delay in paused)
