"""Fixtures for the command-line tests: real servers on their own event-loop threads, and a CLI runner.

The `edgellm` entry point (`edgellm.cli.main`) runs in the test's thread while the servers run on
theirs, as a user's shell and a daemon would; stdout/stderr are captured by capsys.
"""

from __future__ import annotations

import asyncio
import io
import socket
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from edgellm.cli import main
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon
from edgellm.device.rpc.server import start_server as start_daemon
from edgellm.host.server import HostConfig, RunningHost
from edgellm.host.server import start_server as start_host
from edgellm.platforms import choose_platform
from tests.tiny_quant import tiny_artifact, tiny_hf, tiny_model
from tests.trust import trust_server

__all__ = ["tiny_artifact", "tiny_hf", "tiny_model"]


@dataclass
class LoopThread:
    """An asyncio loop on its own thread, for servers the (blocking) CLI talks to."""

    loop: asyncio.AbstractEventLoop

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 120) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield LoopThread(loop)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@pytest.fixture(scope="module")
def model_daemon(
    loop_thread: LoopThread, default_artifact: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningDaemon]:
    """A real daemon with the default model loaded."""
    data = tmp_path_factory.mktemp("cli-daemon")
    running: RunningDaemon = loop_thread.run(
        start_daemon(DaemonConfig.of(port=0, model=default_artifact, data_dir=data, queue_size=4))
    )
    trust_server(running.security, running.port, "model-daemon")  # as a deploy makes a phone known
    yield running
    loop_thread.run(running.stop(0))


@pytest.fixture(scope="module")
def bare_daemon_factory(
    loop_thread: LoopThread, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., RunningDaemon]]:
    """Daemons without a model (start in milliseconds): auth, config, telemetry, virtual phone."""
    started: list[RunningDaemon] = []

    def make(**options: Any) -> RunningDaemon:
        data = tmp_path_factory.mktemp("bare-daemon")
        # A token and TLS as users run it, made known to clients as a deploy makes a phone known.
        config = DaemonConfig.of(port=0, data_dir=data, warmup=False, **options)
        running: RunningDaemon = loop_thread.run(start_daemon(config, platform=choose_platform(config)))
        trust_server(running.security, running.port, "bare-daemon")
        started.append(running)
        return running

    yield make
    for running in started:
        loop_thread.run(running.stop(0))


@pytest.fixture(scope="module")
def host_service(loop_thread: LoopThread) -> Iterator[RunningHost]:
    """A real host service (HostService) on a free port."""
    running: RunningHost = loop_thread.run(start_host(HostConfig(port=0)))
    trust_server(running.security, running.port, "host-service")
    yield running
    loop_thread.run(running.stop(0))


@dataclass
class Result:
    """What one `edgellm ...` run printed and returned."""

    code: int
    out: str
    err: str


@pytest.fixture
def edgellm(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """Run `edgellm ARGS` in-process: edgellm("status", "--target", t, stdin="...")."""

    def run(*argv: str, stdin: str = "") -> Result:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        try:
            code = main(["--log-level", "WARNING", *argv])
        except SystemExit as exc:  # argparse: usage errors exit 2
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
