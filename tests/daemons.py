"""A real daemon for tests: port 0, plaintext loopback, its platform chosen as the CLI chooses it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.platforms import choose_platform


@asynccontextmanager
async def loopback_daemon(artifact: Path, data_dir: Path, **settings: Any) -> AsyncIterator[RunningDaemon]:
    """Serve ARTIFACT from DATA_DIR with SETTINGS (DaemonConfig.of keywords) until the block ends."""
    config = DaemonConfig.of(port=0, model=artifact, data_dir=data_dir, insecure_loopback=True, **settings)
    running = await start_server(config, platform=choose_platform(config))
    try:
        yield running
    finally:
        await running.stop(0)
