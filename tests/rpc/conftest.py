"""Real daemons on port 0 with a FakeEngine: the RPC layer and the core, no model, milliseconds each."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from edgellm.common.channel import ChannelSecurity, open_aio_channel
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.platforms import choose_platform
from edgellm.v1 import device_pb2_grpc
from tests.fakes.fake_artifact import write_fake_artifact
from tests.fakes.fake_engine import DEFAULT_REPLY, FakeEngine

StartFake = Callable[..., Awaitable[RunningDaemon]]


@pytest.fixture(scope="session")
def fake_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake artifact (a manifest and a token table, no weights)."""
    return write_fake_artifact(tmp_path_factory.mktemp("fake-artifact"))


@pytest_asyncio.fixture
async def start_fake(fake_artifact: Path, tmp_path: Path) -> AsyncIterator[StartFake]:
    """Start daemons with the fake model loaded: `await start_fake(reply=..., step_s=..., **config)`."""
    started: list[RunningDaemon] = []

    async def start(
        reply: str = DEFAULT_REPLY, endless: bool = False, step_s: float = 0.0, **config: Any
    ) -> RunningDaemon:
        # No token unless a test gives one (tests/rpc/test_auth.py is where auth is the subject).
        base = DaemonConfig.of(
            port=0,
            model=fake_artifact,
            data_dir=tmp_path / f"data{len(started)}",
            insecure_loopback="auth_token" not in config,
        )
        settings = base.with_settings(**config)
        running = await start_server(
            settings, FakeEngine.factory(reply, endless, step_s), platform=choose_platform(settings)
        )
        started.append(running)
        return running

    yield start
    for running in started:
        await running.stop(0)


@pytest_asyncio.fixture
async def fake_stub(start_fake: StartFake) -> AsyncIterator[device_pb2_grpc.DeviceDaemonAsyncStub]:
    """A stub connected to a fresh fake daemon (default script, no delay)."""
    running = await start_fake()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield device_pb2_grpc.DeviceDaemonStub(channel)


def channel_to(running: RunningDaemon) -> grpc.aio.Channel:
    """An aio channel to a running daemon, with its token and trusting exactly its certificate when it
    has them (plaintext to an --insecure-loopback one)."""
    if running.security.insecure_loopback:
        return open_aio_channel(f"127.0.0.1:{running.port}", ChannelSecurity.insecure_loopback())
    return open_aio_channel(
        f"127.0.0.1:{running.port}", ChannelSecurity(running.token, tls=running.client_tls())
    )
