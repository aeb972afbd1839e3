"""Status, health, auth, models and UpdateConfig over a real gRPC server with the fake engine."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgellm.device.config import DaemonConfig
from edgellm.device.governor.actuation import ThermalPolicy
from edgellm.device.rpc.server import start_server
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.fakes.fake_artifact import write_fake_artifact
from tests.fakes.fake_engine import FakeEngine
from tests.rpc.conftest import StartFake, channel_to


async def test_status_reports_the_loaded_model_and_the_daemons_settings(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    st = await fake_stub.GetStatus(device_pb2.GetStatusRequest())
    assert st.version and st.engine_state == device_pb2.ENGINE_STATE_IDLE
    assert st.model.loaded and st.model.name == "fake-model" and len(st.model.artifact_id) == 64
    assert st.model.quantization == "int4-b32" and st.model.source_model == "fake (tests/fakes)"
    assert st.context_tokens == 2048 and st.load_ms > 0 and st.warmup_ms > 0
    assert st.threads == 2 and st.queue_capacity == 8 and st.max_new_tokens_cap == 2048
    assert st.governor.policy == "thermal" and st.uptime_seconds > 0


async def test_health_is_not_serving_until_a_model_is_loaded(fake_artifact: Path, tmp_path: Path) -> None:
    config = DaemonConfig.of(port=0, data_dir=tmp_path, allow_dir_load=True, insecure_loopback=True)
    running = await start_server(config, FakeEngine.factory())
    try:
        async with channel_to(running) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            stub = device_pb2_grpc.DeviceDaemonStub(channel)

            async def state() -> int:
                reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
                return int(reply.status)

            assert await state() == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(grpc.aio.AioRpcError) as err:
                _ = [
                    r async for r in stub.Generate(device_pb2.GenerateRequest(prompt="hi", max_new_tokens=2))
                ]
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "no model is loaded" in (err.value.details() or "")
            await stub.LoadModel(device_pb2.LoadModelRequest(model=str(fake_artifact)))
            assert await state() == health_pb2.HealthCheckResponse.SERVING
            await stub.UnloadModel(device_pb2.UnloadModelRequest())
            assert await state() == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await running.stop(0)


async def test_reflection_lists_the_services(start_fake: StartFake) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    running = await start_fake()
    async with channel_to(running) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        reply = await anext(aiter(stub.ServerReflectionInfo(iter([request]))))
    names = {s.name for s in reply.list_services_response.service}
    assert {"edgellm.v1.DeviceDaemon", "grpc.health.v1.Health"} <= names


async def test_models_keeps_a_directory_loaded_artifact_after_a_switch(
    start_fake: StartFake, tmp_path: Path
) -> None:
    """Issue 12: `edgellm models` forgot a directory-loaded artifact once another was loaded."""
    a = write_fake_artifact(tmp_path / "a", name="model-a")
    b = write_fake_artifact(tmp_path / "b", name="model-b", context_length=1024)
    running = await start_fake(model=None, allow_dir_load=True)
    async with channel_to(running) as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)

        async def listed() -> list[tuple[str, bool]]:
            models = (await stub.ListModels(device_pb2.ListModelsRequest())).models
            return sorted((m.name, m.loaded) for m in models)

        assert await listed() == []
        loaded_a = await stub.LoadModel(device_pb2.LoadModelRequest(model=str(a)))
        assert await listed() == [("model-a", True)]
        await stub.LoadModel(device_pb2.LoadModelRequest(model=str(b)))
        assert await listed() == [("model-a", False), ("model-b", True)]
        # A remembered directory loads again by its id prefix (or name), not only by its path.
        again = await stub.LoadModel(device_pb2.LoadModelRequest(model=loaded_a.model.artifact_id[:12]))
        assert again.model.name == "model-a"
        await stub.LoadModel(device_pb2.LoadModelRequest(model="model-b"))
        shutil.rmtree(a)  # listed while it exists, not after
        assert await listed() == [("model-b", True)]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.LoadModel(device_pb2.LoadModelRequest(model="model-a"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_restart_remembers_loaded_directories(start_fake: StartFake, tmp_path: Path) -> None:
    a = write_fake_artifact(tmp_path / "a", name="model-a")
    b = write_fake_artifact(tmp_path / "b", name="model-b")
    first = await start_fake(model=None, data_dir=tmp_path / "data")
    await first.core.load(a)
    await first.core.load(b)
    await first.stop(0)
    second = await start_fake(model=None, data_dir=tmp_path / "data")  # reloads b, still lists a
    assert [(e.artifact.name, e.loaded) for e in second.core.list_models()] == [
        ("model-a", False),
        ("model-b", True),
    ]


async def test_update_config_checks_everything_before_changing_anything(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    before = await fake_stub.GetStatus(device_pb2.GetStatusRequest())
    bad = [
        (device_pb2.UpdateConfigRequest(governor_policy="turbo"), "governor_policy"),
        (
            device_pb2.UpdateConfigRequest(thermal_policy="max", setpoint_c=39.0),
            "thermal_policy must be one of comfort, throughput, not 'max'",
        ),
        (device_pb2.UpdateConfigRequest(power="max", setpoint_c=39.0), "power"),
        (device_pb2.UpdateConfigRequest(cluster="nonexistent"), "cluster"),
        (device_pb2.UpdateConfigRequest(setpoint_c=5.0), "setpoint_c"),
        (device_pb2.UpdateConfigRequest(pacing_ms=-1.0), "pacing_ms"),
        (device_pb2.UpdateConfigRequest(threads=0), "threads"),
        (device_pb2.UpdateConfigRequest(threads=1, kv_window=64, n_keep=64), "n_keep"),
        (device_pb2.UpdateConfigRequest(kv_window=4096), "kv_window"),  # the fake's context is 2048
        # Checked by the start flags' own types (device/config.py): the key and its range.
        (device_pb2.UpdateConfigRequest(setpoint_c=95.0), "setpoint_c must be between 20 and 90, got 95"),
        (device_pb2.UpdateConfigRequest(threads=0), "threads must be at least 1, got 0"),
    ]
    for req, needle in bad:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await fake_stub.UpdateConfig(req)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, req
        assert needle in (err.value.details() or ""), req
    after = await fake_stub.GetStatus(device_pb2.GetStatusRequest())
    assert after.threads == before.threads and after.kv_window == before.kv_window
    assert after.governor == before.governor


async def test_update_config_applies_window_pinning_and_threads(start_fake: StartFake) -> None:
    running = await start_fake()
    async with channel_to(running) as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        st = await stub.UpdateConfig(device_pb2.UpdateConfigRequest(kv_window=256, n_keep=8))
        assert (st.kv_window, st.n_keep) == (256, 8)
        st = await stub.UpdateConfig(device_pb2.UpdateConfigRequest(pacing_ms=5.0))
        assert st.governor.policy == "pinned"
        st = await stub.UpdateConfig(device_pb2.UpdateConfigRequest(governor_policy="thermal", pacing_ms=0.0))
        assert st.governor.policy == "thermal" and st.governor.thermal_policy == "comfort"
        st = await stub.UpdateConfig(device_pb2.UpdateConfigRequest(thermal_policy="throughput"))
        assert st.governor.thermal_policy == "throughput" and st.governor.policy == "thermal"
        assert running.core.governor.controller.throughput  # a new controller, on the fastest rung
        st = await stub.UpdateConfig(device_pb2.UpdateConfigRequest(thermal_policy="comfort"))
        assert st.governor.thermal_policy == "comfort" and not running.core.governor.controller.throughput
        before = await stub.GetStatus(device_pb2.GetStatusRequest())
        st = await stub.UpdateConfig(device_pb2.UpdateConfigRequest(threads=1))
    # A thread change reloads the engine (MNN reads thread_num only at load): a new engine, same model.
    assert st.threads == 1 and st.governor.threads == 1
    assert st.model.artifact_id == before.model.artifact_id
    loaded = running.core.models.loaded
    assert loaded is not None and isinstance(loaded.engine, FakeEngine) and loaded.engine.config.threads == 1


async def test_telemetry_samples_carry_engine_and_governor_state(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    call = fake_stub.StreamTelemetry(device_pb2.StreamTelemetryRequest(interval_ms=50))
    samples: list[device_pb2.TelemetrySample] = []
    while len(samples) < 2 and isinstance(s := await call.read(), device_pb2.TelemetrySample):
        samples.append(s)
    call.cancel()
    assert samples[1].unix_time > samples[0].unix_time
    assert samples[0].engine_state == device_pb2.ENGINE_STATE_IDLE
    assert samples[0].mem_total_bytes > 0 and samples[0].governor.policy == "thermal"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await fake_stub.StreamTelemetry(device_pb2.StreamTelemetryRequest(interval_ms=10)).read()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_the_thermal_policy_given_at_start_reaches_the_controller_and_the_status(
    start_fake: StartFake,
) -> None:
    running = await start_fake(thermal_policy=ThermalPolicy.THROUGHPUT)
    assert running.core.governor.controller.throughput
    async with channel_to(running) as channel:
        st = await device_pb2_grpc.DeviceDaemonStub(channel).GetStatus(device_pb2.GetStatusRequest())
    assert st.governor.thermal_policy == "throughput"
