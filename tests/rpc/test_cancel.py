"""Cancellation, deadlines, the bounded queue and engine failures, with a fake engine that takes time."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.engine.artifact import Artifact
from edgellm.engine.base import Logits
from edgellm.engine.config import EngineConfig
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.fakes.fake_engine import FakeEngine
from tests.polling import apoll
from tests.rpc.conftest import StartFake, channel_to

STEP_S = 0.005  # per forward: a 1,500-token reply takes ~8 s, so only a cancel can end it early


def long(n: int = 1500, request_id: str = "") -> device_pb2.GenerateRequest:
    return device_pb2.GenerateRequest(prompt="Write a long essay.", max_new_tokens=n, request_id=request_id)


def forwards(running: RunningDaemon) -> int:
    """Forward passes the daemon's (fake) engine has run since its load."""
    loaded = running.core.models.loaded
    assert loaded is not None and isinstance(loaded.engine, FakeEngine)
    return loaded.engine.forwards


async def test_cancelling_the_call_frees_the_engine_within_a_token(start_fake: StartFake) -> None:
    running = await start_fake(endless=True, step_s=STEP_S)
    async with channel_to(running) as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        call = stub.Generate(long())
        got = 0
        async for _ in call:
            got += 1
            if got == 3:
                call.cancel()
                break
        # The next request gets the engine at once, not after the 1,500-token tail.
        after = [r async for r in stub.Generate(long(4))]
        status = await stub.GetStatus(device_pb2.GetStatusRequest())
    assert after[-1].stats.completion_tokens == 4
    assert forwards(running) < 1500  # counted, not timed: the tail was never decoded
    assert status.engine_state == device_pb2.ENGINE_STATE_IDLE and status.requests_served == 2


async def test_a_deadline_stops_generation(start_fake: StartFake) -> None:
    running = await start_fake(endless=True, step_s=STEP_S)
    async with channel_to(running) as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.Generate(long(), timeout=0.3):
                pass
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        after = [r async for r in stub.Generate(long(4))]
    assert after[-1].stats.completion_tokens == 4
    assert forwards(running) < 1500  # the deadline ended the first request's decode


async def test_the_cancel_rpc_stops_a_running_request_by_its_id(start_fake: StartFake) -> None:
    running = await start_fake(endless=True, step_s=STEP_S)
    async with channel_to(running) as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        call = stub.Generate(long(request_id="essay-1"))
        first = await call.read()
        assert isinstance(first, device_pb2.GenerateResponse) and first.request_id == "essay-1"
        assert (await stub.Cancel(device_pb2.CancelRequest(request_id="essay-1"))).cancelled
        rest: list[device_pb2.GenerateResponse] = []
        while isinstance(r := await call.read(), device_pb2.GenerateResponse):
            rest.append(r)
        assert not (await stub.Cancel(device_pb2.CancelRequest(request_id="essay-1"))).cancelled
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Cancel(device_pb2.CancelRequest())
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert rest[-1].finish_reason == device_pb2.FINISH_REASON_CANCELLED
    assert rest[-1].stats.completion_tokens < 1500


async def test_a_full_queue_is_resource_exhausted(start_fake: StartFake) -> None:
    running = await start_fake(endless=True, step_s=STEP_S, queue_size=1)
    async with channel_to(running) as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        first = stub.Generate(long(400))
        await first.read()  # running
        second = stub.Generate(long(400))  # waits in the queue (capacity 1)

        async def queued() -> bool:
            return (await stub.GetStatus(device_pb2.GetStatusRequest())).queue_depth == 1

        await apoll(queued, "the second request queued", timeout_s=30)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            _ = [r async for r in stub.Generate(long(4))]
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "queue is full" in (err.value.details() or "")
        first.cancel()
        second.cancel()


class _BrokenFake(FakeEngine):
    """A fake whose decode trips an internal invariant (a plain ValueError), as a daemon bug would."""

    def decode(self, token: int) -> Logits:
        raise ValueError("bad erase range [5, 3) of 2")


async def test_an_internal_invariant_failure_is_internal_not_the_clients_fault(
    fake_artifact: Path, tmp_path: Path
) -> None:
    def factory(artifact: Artifact, config: EngineConfig) -> FakeEngine:
        return _BrokenFake(artifact, config)

    running = await start_server(
        DaemonConfig.of(port=0, model=fake_artifact, data_dir=tmp_path, warmup=False, insecure_loopback=True),
        factory,
    )
    try:
        async with channel_to(running) as ch:
            stub = device_pb2_grpc.DeviceDaemonStub(ch)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                _ = [r async for r in stub.Generate(long(8))]
            assert err.value.code() == grpc.StatusCode.INTERNAL
            details = err.value.details() or ""
            assert "ValueError" in details and "request id" in details
            assert "erase range" not in details  # the exception's text stays in the log (S16)
            status = await stub.GetStatus(device_pb2.GetStatusRequest())
            assert status.engine_state == device_pb2.ENGINE_STATE_IDLE  # the worker survived it
    finally:
        await running.stop(0)
