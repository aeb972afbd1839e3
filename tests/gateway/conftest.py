"""Gateways in front of real daemons on port 0, driven by the official `openai` SDK over real sockets.

Most tests use a daemon with the FakeEngine (tests/fakes: scripted logits, no model) to test the
gateway layer in milliseconds; tests/gateway/test_acceptance.py uses the real model.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio

from edgellm.client.aio import connect
from edgellm.common.channel import ChannelSecurity
from edgellm.device.rpc.server import RunningDaemon
from edgellm.gateway.app import Gateway
from edgellm.gateway.config import GatewayConfig
from edgellm.gateway.server import RunningGateway, start_gateway
from tests.rpc.conftest import fake_artifact, start_fake  # noqa: F401  (fixtures, shared)

KEY = "test-gateway-key"  # the key the gateways below require unless a test says otherwise
StartDaemon = Callable[..., Awaitable[RunningDaemon]]
StartGateway = Callable[..., Awaitable[RunningGateway]]


@pytest.fixture
def start_daemon(start_fake: StartDaemon) -> StartDaemon:  # noqa: F811  (the fixture, by name)
    """Fake-engine daemons, as tests/rpc starts them: `await start_daemon(reply=..., **config)`."""
    return start_fake


@pytest_asyncio.fixture
async def start_gw(start_daemon: StartDaemon) -> AsyncIterator[StartGateway]:
    """Start gateways in front of a daemon: `await start_gw(daemon, daemon_token=..., **config)`."""
    started: list[RunningGateway] = []

    async def start(
        daemon: RunningDaemon | None, daemon_token: str | None = None, **config: Any
    ) -> RunningGateway:
        defaults: dict[str, Any] = {"port": 0, "telemetry_period_s": 0.2}
        if not {"api_key", "api_key_file", "no_api_key"} & config.keys():
            defaults["api_key"] = KEY  # a key by default, as the gateway command has
        cfg = GatewayConfig(**{**defaults, **config})
        if daemon is not None:
            cfg = replace(cfg, target=f"127.0.0.1:{daemon.port}")
        if daemon is None or daemon.security.insecure_loopback:
            security = ChannelSecurity(daemon_token) if daemon_token else ChannelSecurity.insecure_loopback()
        else:  # the daemon's token (or a test's wrong one) over TLS to exactly its certificate
            security = ChannelSecurity(daemon_token, tls=daemon.client_tls())
        running = await start_gateway(cfg, connect(cfg.target, security))
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


# Per request. Answers of the real model: a 256-token constrained answer took over 30 s on the
# 2-core CI machine at load average 5-7 (APITimeoutError in CI, 2026-12-05, with 30 s); a wedged
# gateway still fails a test well inside pytest's own 600 s.
SDK_TIMEOUT = 180.0


def sdk(gw: RunningGateway, api_key: str = KEY) -> openai.AsyncOpenAI:
    """The official SDK pointed at a gateway (no retries: a test sees every status as it is)."""
    return openai.AsyncOpenAI(base_url=gw.url, api_key=api_key, max_retries=0, timeout=SDK_TIMEOUT)


@pytest_asyncio.fixture
async def client(gateway: RunningGateway) -> AsyncIterator[openai.AsyncOpenAI]:
    """The SDK on the fake gateway."""
    async with sdk(gateway) as c:
        yield c


def gateway_of(gw: RunningGateway) -> Gateway:
    """The Gateway object behind a running server (its telemetry watch, metrics, sessions)."""
    gateway: Gateway = gw.server.config.app.state.gateway  # type: ignore[union-attr]
    return gateway


def keyed_http(gw: RunningGateway, key: str = KEY) -> httpx.AsyncClient:
    """An httpx client for a gateway's root URL, sending KEY."""
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{gw.port}",
        headers={"Authorization": f"Bearer {key}"},
        timeout=SDK_TIMEOUT,
    )


async def telemetry_read(gw: RunningGateway, within_s: float = 5.0) -> None:
    """Wait until the gateway holds its first telemetry sample."""
    watch = gateway_of(gw).watch
    for _ in range(int(within_s / 0.01)):
        if watch.samples:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no telemetry sample reached the gateway")
