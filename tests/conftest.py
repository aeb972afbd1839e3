"""Shared fixtures: the real default artifact and real daemons on port 0.

Every test that uses the real model (the `default_artifact` fixture, directly or through `daemon`,
`engine`, ...) is marked `model`: `pytest -m "not model"` runs the rest in well under a minute.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from edgellm.common.channel import ChannelSecurity, open_aio_channel
from edgellm.common.paths import default_artifact_dir
from edgellm.common.tokens import CONFIG_DIR_ENV, HOME_ENV, TOKEN_ENV
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.v1 import device_pb2_grpc


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs the real model artifact as `model`."""
    for item in items:
        if "default_artifact" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.model)


@pytest.fixture(scope="session")
def default_artifact() -> Path:
    """The real default artifact (built once by `make artifact`, or here if missing)."""
    from edgellm.host.convert.pipeline import ensure_default_artifact

    env = os.environ.get("EDGELLM_DEFAULT_ARTIFACT")
    return ensure_default_artifact(Path(env) if env else default_artifact_dir())


@pytest.fixture(scope="session", autouse=True)
def edgellm_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Tests never read or write the developer's ~/.edgellm or ~/.config/edgellm (tokens, keys).

    ~/.edgellm becomes the session daemon's data dir, so a client in a test finds its token
    without flags, as a user's client finds the token of a daemon on the same machine.
    """
    home = tmp_path_factory.mktemp("edgellm-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(HOME_ENV, str(home))
        mp.setenv(CONFIG_DIR_ENV, str(tmp_path_factory.mktemp("edgellm-config")))
        for name in (TOKEN_ENV, "EDGELLM_TLS_PIN", "EDGELLM_TLS_CA", "EDGELLM_TARGET"):
            mp.delenv(name, raising=False)
        yield home


@pytest.fixture(scope="session")
def tmp_data_dir(edgellm_home: Path) -> Path:
    """The session daemon's data dir (its token lives there)."""
    return edgellm_home


@pytest_asyncio.fixture(scope="session")
async def daemon(default_artifact: Path, tmp_data_dir: Path) -> AsyncIterator[RunningDaemon]:
    """One real daemon with the default model loaded, shared by the session."""
    running = await start_server(
        DaemonConfig.of(port=0, model=default_artifact, data_dir=tmp_data_dir, queue_size=4)
    )
    yield running
    await running.stop(0)


@pytest_asyncio.fixture(scope="session")
async def daemon_stub(daemon: RunningDaemon) -> AsyncIterator[device_pb2_grpc.DeviceDaemonAsyncStub]:
    """An aio stub connected to the session daemon, sending its token."""
    async with open_aio_channel(f"127.0.0.1:{daemon.port}", ChannelSecurity(daemon.token)) as channel:
        yield device_pb2_grpc.DeviceDaemonStub(channel)


@pytest.fixture
def repo_root() -> Path:
    """The repository root."""
    return Path(__file__).resolve().parent.parent
