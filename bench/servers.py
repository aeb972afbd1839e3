"""Server processes for the HTTP benches: start one (nice level, CPUs), wait until it answers."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from edgellm.client.client import DaemonClient
from edgellm.common.channel import ChannelSecurity


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(ready: str, statuses: tuple[int, ...] = (200,)) -> bool:
    """Whether `ready` (an HTTP URL answering one of STATUSES, or a daemon's gRPC target with a model
    loaded) answers now."""
    try:
        if ready.startswith("http"):
            return httpx.get(ready, timeout=2).status_code in statuses
        # Benchmark daemons run with --insecure-loopback (the serving path; TLS is measured apart).
        with DaemonClient(ready, security=ChannelSecurity.insecure_loopback()) as c:
            c.wait_ready(timeout=2)
            return c.status().HasField("model")
    except Exception:  # noqa: BLE001 - anything short of ready means: poll again
        return False


@contextmanager
def serve(
    name: str,
    argv: list[str],
    ready: str,
    nice: int = 0,
    cpus: set[int] | None = None,
    statuses: tuple[int, ...] = (200,),
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `argv` (at `nice`, on `cpus`) until the block ends; its output goes to a /tmp log."""
    # Why `nice`/`taskset` in the command line, not a preexec_fn: this process has gRPC threads
    # (the readiness checks), and Python code run in a child between fork and exec crashed with
    # "PyGILState_Release: auto-releasing thread-state" (the gateway died with SIGABRT).
    prefix = ["nice", "-n", str(nice)] if nice else []
    if cpus:
        prefix += ["taskset", "-c", ",".join(str(c) for c in sorted(cpus))]
    log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen([*prefix, *argv], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 180
        while not _answers(ready, statuses):
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited with {proc.returncode}: see {log.name}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} did not get ready: see {log.name}")
            time.sleep(0.5)
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


@contextmanager
def daemon_and_gateway(artifact: Path) -> Iterator[tuple[str, str]]:
    """A plaintext-loopback daemon serving ARTIFACT and a keyless gateway in front of it.

    Yields (the daemon's gRPC target, the gateway's base URL) once both answer.
    """
    dport, gport = free_port(), free_port()
    target = f"127.0.0.1:{dport}"
    edgellm = [sys.executable, "-m", "edgellm"]
    daemon_argv = [*edgellm, "daemon", "--port", str(dport), "--model", str(artifact)]
    daemon_argv += ["--data-dir", tempfile.mkdtemp(), "--insecure-loopback"]
    gateway_argv = [*edgellm, "gateway", "--target", target, "--port", str(gport), "--no-api-key"]
    gateway_argv += ["--insecure-loopback"]
    base = f"http://127.0.0.1:{gport}"
    with serve("daemon", daemon_argv, target), serve("gateway", gateway_argv, f"{base}/health"):
        yield target, base
