"""A real `edgellm daemon` in its own process, as a user starts it: for the fuzz, crash and load runs.

A separate process because these runs must see what an attacker or a flaky phone does to the
process itself: an exit (a native crash), its RSS, a `kill -9` mid-write and a restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgellm.common.channel import ChannelSecurity, open_channel
from edgellm.common.tls import ClientTls
from edgellm.common.tokens import CONFIG_DIR_ENV, HOME_ENV, TOKEN_ENV


def free_port() -> int:
    """A port free right now on 127.0.0.1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_bytes(pid: int) -> int:
    """Resident set size of PID from /proc (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class DaemonProcess:
    """`edgellm daemon --data-dir DATA --port PORT ARGS`, its log in DATA/../daemon-N.log."""

    data_dir: Path
    args: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        """The token the daemon made on its first start (its default file)."""
        return (self.data_dir / "token").read_text().strip()

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"daemon-{self.starts}.log"

    def start(self, want_serving: bool = True, timeout: float = 180) -> None:
        """Start the process and wait until health answers (SERVING when want_serving)."""
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if k not in (HOME_ENV, CONFIG_DIR_ENV, TOKEN_ENV)}
        argv = [sys.executable, "-m", "edgellm.cli", "daemon", "--port", str(self.port)]
        argv += ["--data-dir", str(self.data_dir), *self.args]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            self.wait_health(want_serving, timeout)
        except BaseException:
            self.stop()  # never leave a daemon behind when it did not come up
            raise

    @property
    def tls(self) -> ClientTls | None:
        """Trust of exactly this daemon's certificate (made on its first start; None before it)."""
        cert = self.data_dir / "tls" / "cert.pem"
        return ClientTls(roots=cert.read_bytes()) if cert.is_file() else None

    def _health_channel(self) -> grpc.Channel:
        """A channel for health: TLS to the daemon's certificate, no token (plaintext before it has one)."""
        tls = self.tls
        if tls is None:
            return grpc.insecure_channel(self.target)
        return open_channel(self.target, ChannelSecurity(None, tls=tls))

    def wait_health(self, want_serving: bool, timeout: float) -> str:
        """Poll grpc.health.v1 until it answers (SERVING if asked); fail early if the process died."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited rc={self.proc.returncode}: {self.log_tail()}")
            with self._health_channel() as ch:  # anew each time: the certificate appears at first start
                try:
                    st = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
                    name = health_pb2.HealthCheckResponse.ServingStatus.Name(st.status)
                    if not want_serving or name == "SERVING":
                        return str(name)
                except grpc.RpcError:
                    pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"daemon not healthy after {timeout} s: {self.log_tail()}")
            time.sleep(0.2)  # polling health, not a synchronisation sleep

    def health(self) -> str:
        """SERVING / NOT_SERVING, or the gRPC code name when health does not answer."""
        with self._health_channel() as ch:
            try:
                st = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            except grpc.RpcError as err:
                return str(err.code().name)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(st.status))

    def channel(self, token: str | None = None) -> grpc.Channel:
        """A channel carrying the daemon's token (or TOKEN)."""
        return open_channel(self.target, ChannelSecurity(token or self.token, "test", self.tls))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss(self) -> int:
        assert self.proc is not None
        return rss_bytes(self.proc.pid)

    def kill9(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed (a phone losing power, the OOM killer)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        """SIGTERM and wait; the exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc is not None else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(30)

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""
