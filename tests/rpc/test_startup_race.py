"""The startup race: a Generate that arrives while the daemon loads its --model waits for the load
(within its deadline) instead of hearing "no model is loaded"; past the deadline it is UNAVAILABLE
saying what is loading and for how long. A real server on a real port, a fake engine whose load
blocks until the test releases it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.engine.artifact import Artifact
from edgellm.engine.config import EngineConfig
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc
from tests.fakes.fake_engine import DEFAULT_REPLY, FakeEngine

CAPITAL = [common_pb2.ChatMessage(role="user", content="What is the capital of France?")]


class GatedLoad:
    """An engine factory whose engines' load() blocks on the worker thread until `release()`."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def release(self) -> None:
        """Let every load (now and later) finish."""
        self.gate.set()

    def __call__(self, artifact: Artifact, config: EngineConfig) -> FakeEngine:
        gate = self.gate

        class Engine(FakeEngine):
            def load(self) -> None:
                if not gate.wait(60):  # a bound so a broken test cannot hang the run
                    raise RuntimeError("the test never released the load")
                super().load()

        return Engine(artifact, config)


async def _until(check: Callable[[], bool]) -> None:
    """Poll CHECK (every 10 ms) until it holds, failing after 30 s."""
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)


class Starting:
    """A daemon whose start_server is still loading its --model, and a channel to it."""

    def __init__(
        self,
        task: asyncio.Task[RunningDaemon],
        daemon: RunningDaemon,
        gated: GatedLoad,
        channel: grpc.aio.Channel,
    ) -> None:
        self.task = task
        self.daemon = daemon
        self.gated = gated
        self.channel = channel
        self.stub = device_pb2_grpc.DeviceDaemonStub(channel)

    async def generate(self, deadline_s: float) -> str:
        """One Generate's text."""
        request = device_pb2.GenerateRequest(messages=CAPITAL, max_new_tokens=48)
        return "".join([r.text async for r in self.stub.Generate(request, timeout=deadline_s)])


@pytest_asyncio.fixture
async def starting(fake_artifact: Path, tmp_path: Path) -> AsyncIterator[Starting]:
    """start_server with --model, stopped inside its load until the test releases it."""
    gated = GatedLoad()
    config = DaemonConfig.of(
        port=0, model=fake_artifact, data_dir=tmp_path / "data", insecure_loopback=True, warmup=False
    )
    listening: list[RunningDaemon] = []
    task = asyncio.create_task(start_server(config, gated, on_listening=listening.append))
    await _until(lambda: bool(listening) or task.done())
    [daemon] = listening
    await _until(lambda: daemon.core.models.loading is not None)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as channel:
        yield Starting(task, daemon, gated, channel)
        gated.release()
        running = await task
        await running.stop(0)


async def test_a_generate_during_the_startup_load_waits_for_it_and_is_answered(starting: Starting) -> None:
    """Before: FAILED_PRECONDITION "no model is loaded; ... start the daemon with --model"."""
    call = asyncio.create_task(starting.generate(deadline_s=30))
    status = await starting.stub.GetStatus(device_pb2.GetStatusRequest(), timeout=10)
    assert status.engine_state == device_pb2.ENGINE_STATE_LOADING
    await _until(lambda: starting.daemon.core.models.load_waiters == 1)  # the request is waiting
    assert not call.done()
    starting.gated.release()
    assert await call == DEFAULT_REPLY


async def test_a_generate_whose_deadline_ends_during_the_load_is_unavailable_saying_it_is_loading(
    starting: Starting,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await starting.generate(deadline_s=3.0)  # it answers 0.3 s before the deadline
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "model fake-model is loading (for " in (err.value.details() or "")
    starting.gated.release()
    await starting.task  # the load completes; the next request is served
    assert await starting.generate(deadline_s=30) == DEFAULT_REPLY
