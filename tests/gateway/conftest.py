"""Gateways in front of real daemons on port 0, driven by the official `openai` SDK over real sockets.

Most tests use a daemon with the FakeEngine (tests/fakes: scripted logits, no model) to test the
gateway layer in milliseconds; tests/gateway/test_acceptance.py uses the real model.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest
import pytest_asyncio

from edgellm.client.aio import connect
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.gateway.app import Gateway
from edgellm.gateway.config import GatewayConfig
from edgellm.gateway.server import RunningGateway, start_gateway
from tests.fakes.fake_artifact import write_fake_artifact
from tests.fakes.fake_engine import DEFAULT_REPLY, FakeEngine

StartDaemon = Callable[..., Awaitable[RunningDaemon]]
StartGateway = Callable[..., Awaitable[RunningGateway]]


@pytest.fixture(scope="session")
def fake_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake artifact (a manifest and a token table, no weights)."""
    return write_fake_artifact(tmp_path_factory.mktemp("fake-artifact"))


@pytest_asyncio.fixture
async def start_daemon(fake_artifact: Path, tmp_path: Path) -> AsyncIterator[StartDaemon]:
    """Start fake-engine daemons: `await start_daemon(reply=..., endless=..., step_s=..., **config)`."""
    started: list[RunningDaemon] = []

    async def start(
        reply: str = DEFAULT_REPLY, endless: bool = False, step_s: float = 0.0, **config: Any
    ) -> RunningDaemon:
        # No token unless a test gives one (auth has its own tests).
        base = DaemonConfig(
            port=0,
            model=fake_artifact,
            data_dir=tmp_path / f"data{len(started)}",
            insecure_loopback="auth_token" not in config,
        )
        running = await start_server(replace(base, **config), FakeEngine.factory(reply, endless, step_s))
        started.append(running)
        return running

    yield start
    for running in started:
        await running.stop(0)


@pytest_asyncio.fixture
async def start_gw(start_daemon: StartDaemon) -> AsyncIterator[StartGateway]:
    """Start gateways in front of a daemon: `await start_gw(daemon, daemon_token=..., **config)`."""
    started: list[RunningGateway] = []

    async def start(
        daemon: RunningDaemon | None, daemon_token: str | None = None, **config: Any
    ) -> RunningGateway:
        cfg = GatewayConfig(**{"port": 0, "telemetry_period_s": 0.2, **config})
        if daemon is not None:
            cfg = replace(cfg, target=f"127.0.0.1:{daemon.port}")
        running = await start_gateway(cfg, connect(cfg.target, daemon_token))
        started.append(running)
        return running

    yield start
    for running in started:
        await running.stop()


@pytest_asyncio.fixture
async def fake_daemon(start_daemon: StartDaemon) -> RunningDaemon:
    """A fake-engine daemon with the default script."""
    return await start_daemon()


@pytest_asyncio.fixture
async def gateway(start_gw: StartGateway, fake_daemon: RunningDaemon) -> RunningGateway:
    """A gateway in front of the fake daemon."""
    return await start_gw(fake_daemon)


def sdk(gw: RunningGateway, api_key: str = "none") -> openai.AsyncOpenAI:
    """The official SDK pointed at a gateway (no retries: a test sees every status as it is)."""
    return openai.AsyncOpenAI(base_url=gw.url, api_key=api_key, max_retries=0, timeout=30.0)


@pytest_asyncio.fixture
async def client(gateway: RunningGateway) -> AsyncIterator[openai.AsyncOpenAI]:
    """The SDK on the fake gateway."""
    async with sdk(gateway) as c:
        yield c


def gateway_of(gw: RunningGateway) -> Gateway:
    """The Gateway object behind a running server (its telemetry watch, metrics, sessions)."""
    gateway: Gateway = gw.server.config.app.state.gateway  # type: ignore[union-attr]
    return gateway


async def telemetry_read(gw: RunningGateway, within_s: float = 5.0) -> None:
    """Wait until the gateway holds its first telemetry sample."""
    watch = gateway_of(gw).watch
    for _ in range(int(within_s / 0.01)):
        if watch.samples:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no telemetry sample reached the gateway")
