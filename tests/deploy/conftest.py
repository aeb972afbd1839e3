"""Fixtures: a fake phone behind a fake adb server, and a real daemon standing in for the phone's."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgellm.common.channel import ChannelSecurity
from edgellm.common.tokens import CONFIG_DIR_ENV
from edgellm.deploy.adb import AdbServer
from edgellm.deploy.device import DeployConfig, DeployIO
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from tests.deploy.fake_adb_server import FakeAdbServer
from tests.deploy.fake_phone import FakePhone, fake_wheel


@dataclass
class ThreadDaemon:
    """A real daemon (no model: health NOT_SERVING) on its own event loop thread."""

    running: RunningDaemon
    loop: asyncio.AbstractEventLoop

    def set_serving(self) -> None:
        from grpc_health.v1 import health_pb2

        async def _set() -> None:
            for name in ("", "edgellm.v1.DeviceDaemon"):
                self.running.health.set(name, health_pb2.HealthCheckResponse.SERVING)

        asyncio.run_coroutine_threadsafe(_set(), self.loop).result(5)


@pytest.fixture(scope="module")
def phone_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadDaemon]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    data = tmp_path_factory.mktemp("phone-daemon")
    running = asyncio.run_coroutine_threadsafe(
        start_server(DaemonConfig.of(port=0, data_dir=data, warmup=False)), loop
    ).result(30)
    yield ThreadDaemon(running, loop)
    asyncio.run_coroutine_threadsafe(running.stop(0), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Rig:
    phone: FakePhone
    adb: FakeAdbServer
    config: DeployConfig
    io: DeployIO
    output: list[str]
    prompts: list[str]
    daemon: ThreadDaemon


@pytest.fixture
def rig(phone_daemon: ThreadDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    # The phone's daemon has a real token, which the fake phone's installer "made"; the host's
    # config dir is this test's own, so the token the deploy fetches lands where a client looks.
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "host-config"))
    tls = phone_daemon.running.security.tls
    assert tls is not None  # the daemon serves TLS by default; the deploy pins its certificate
    phone = FakePhone(
        ports={50051: phone_daemon.running.port},
        daemon_token=phone_daemon.running.token or "",
        daemon_cert=tls.cert.read_text(),
    )
    output: list[str] = []
    prompts: list[str] = []

    def confirm(text: str) -> bool:
        prompts.append(text)
        return True

    def installer(target: str, artifact: Path, security: ChannelSecurity) -> str:
        # The deploy pushes with the phone's token, to the phone's certificate only.
        assert security.token == phone_daemon.running.token
        assert security.tls is not None and security.tls.roots == tls.cert.read_bytes()
        output.append(f"installer {target} {artifact.name}")
        phone_daemon.set_serving()
        return "smollm2-135m-q4"

    with FakeAdbServer([phone]) as adb:
        config = DeployConfig(
            adb=AdbServer("127.0.0.1", adb.port),
            local_port=free_port(),
            # Why a free port: the default 58022 is fixed, so two test runs on one host collided.
            ssh_local_port=free_port(),
            wheel=fake_wheel(tmp_path),
            health_timeout_s=20.0,
        )
        io = DeployIO(out=output.append, confirm=confirm, installer=installer)
        yield Rig(phone, adb, config, io, output, prompts, phone_daemon)
