"""gRPC server plumbing both services share: auth, health, reflection, binding, signals."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from edgellm.common.auth import TokenAuthInterceptor, check_bind
from edgellm.common.decode import StrictDecodeInterceptor
from edgellm.common.errors import FailedPrecondition
from edgellm.common.tls import ClientTls, ServerTls, ensure_self_signed, fingerprint
from edgellm.common.tokens import WatchedSecret, ensure_token, read_token_file

MAX_FRAME_BYTES = (1 << 24) - 1  # the largest frame HTTP/2 allows (RFC 9113 §4.2)


@dataclass(frozen=True)
class ServerSecurity:
    """What a server requires: a bearer token (None only with insecure_loopback) and TLS.

    token_file: where the token came from; the server re-reads it when it changes, so
    `edgellm token rotate` takes effect without a restart (None: an explicit value, fixed).
    """

    token: str | None
    tls: ServerTls | None = None
    insecure_loopback: bool = False
    token_file: Path | None = None

    @classmethod
    def resolve(
        cls,
        host: str,
        *,
        token: str | None,
        token_file: Path | None,
        default_token_file: Path,
        adopt: tuple[Path, ...] = (),
        tls: ServerTls | None,
        insecure_loopback: bool,
        self_signed_dir: Path | None = None,
    ) -> ServerSecurity:
        """Explicit token, else the token file, else DEFAULT_TOKEN_FILE (made on first start, adopting
        the first of ADOPT that exists); TLS as given, else the self-signed pair in SELF_SIGNED_DIR
        (made on first start); then check the bind.

        Why TLS by default, on loopback too: a client sends the token only to a server whose
        certificate it pinned, so an app squatting on the port while the daemon is down gets
        nothing (H1, docs/security.md).
        """
        if insecure_loopback:
            check_bind(host, None, tls is not None, insecure_loopback=True)
            return cls(None, tls, insecure_loopback=True)
        source: Path | None = None
        if not token:
            source = token_file if token_file is not None else default_token_file
            token = (
                read_token_file(token_file)
                if token_file is not None
                else ensure_token(default_token_file, adopt)
            )
        if tls is None and self_signed_dir is not None:
            names = () if host in ("0.0.0.0", "::", "") else (host,)
            tls = ensure_self_signed(self_signed_dir, names)
        check_bind(host, token, tls is not None, insecure_loopback=False)
        return cls(token, tls, token_file=source)

    def client_tls(self) -> ClientTls | None:
        """Client trust of exactly this server's certificate (None without TLS)."""
        if self.tls is None:
            return None
        pem = self.tls.cert.read_bytes()
        return ClientTls(roots=pem, where=(f"{fingerprint(pem)} ({self.tls.cert})",))


def new_server(host: str, security: ServerSecurity, max_message_bytes: int | None = None) -> grpc.aio.Server:
    """An aio server that checks the token on every RPC but health (unless insecure_loopback)."""
    check_bind(host, security.token, security.tls is not None, security.insecure_loopback)
    # Why a large HTTP/2 frame size: the default 16 KiB frames cut each 1 MiB push chunk into 64
    # frames; allowing larger ones took bare gRPC streaming of 1 MiB messages over loopback from
    # 849 to 1,087 MB/s on the 2-core build machine (docs/benchmarks.md).
    # Why so_reuseport 0: gRPC sets SO_REUSEPORT by default, so a second daemon on the same port
    # also bound and the kernel split connections between two different models; now it fails.
    options: list[tuple[str, int]] = [
        ("grpc.http2.max_frame_size", MAX_FRAME_BYTES),
        ("grpc.so_reuseport", 0),
    ]
    if max_message_bytes:
        options += [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
    # The token is checked first: a call without it is never decoded at all.
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if security.token:
        token_file = security.token_file
        secret = WatchedSecret(token_file, value=security.token) if token_file else security.token
        interceptors.append(TokenAuthInterceptor(secret))
    interceptors.append(StrictDecodeInterceptor())
    return grpc.aio.server(interceptors=interceptors, options=options)


class CappedHealthServicer(health.HealthServicer):  # type: ignore[misc]  # grpc_health is untyped
    """grpc's health servicer with an asyncio Watch capped at MAX_WATCHERS streams.

    Why: Watch is open without a token (supervisors probe it), and the stock Watch is a blocking
    generator that holds one executor thread per stream on an aio server; a few idle watchers
    from any local app would starve the daemon's own off-loop work. This Watch holds no thread,
    and one stream over the cap answers RESOURCE_EXHAUSTED.
    """

    def __init__(self, max_watchers: int) -> None:
        super().__init__(experimental_non_blocking=True)
        self.max_watchers = max_watchers
        self._wakeups: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def set(self, service: str, status: health_pb2.HealthCheckResponse.ServingStatus.ValueType) -> None:
        """Record the status and wake every watcher (callable from any thread)."""
        super().set(service, status)
        for loop, event in list(self._wakeups):
            with contextlib.suppress(RuntimeError):  # that watcher's loop already closed (shutdown)
                loop.call_soon_threadsafe(event.set)

    async def Watch(  # an async generator on the aio server (the stock one blocks a thread)
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        """Stream the service's status now and on every change."""
        if len(self._wakeups) >= self.max_watchers:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.max_watchers} health watchers are already open; use Health/Check to poll",
            )
        wakeup = (asyncio.get_running_loop(), asyncio.Event())
        self._wakeups.add(wakeup)
        try:
            last = None
            while True:
                wakeup[1].clear()
                with self._lock:
                    status = self._server_status.get(
                        request.service, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
                    )
                if status != last:
                    last = status
                    yield health_pb2.HealthCheckResponse(status=status)
                await wakeup[1].wait()
        finally:
            self._wakeups.discard(wakeup)


class Health:
    """The health service for one gRPC service name (and the server as a whole, name "")."""

    def __init__(self, server: grpc.aio.Server, service_name: str, max_watchers: int = 16) -> None:
        self.service_name = service_name
        self.servicer = CappedHealthServicer(max_watchers)
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)
        reflection.enable_server_reflection(
            (service_name, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )

    def set(self, serving: bool) -> None:
        """SERVING or NOT_SERVING for the server and the service."""
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", self.service_name):
            self.servicer.set(name, status)


class CannotListen(FailedPrecondition):
    """The server cannot bind its address (in use, not this machine's, or privileged)."""


_WHY = {
    errno.EADDRINUSE: "is already in use (another edgellm daemon or host service?): stop it, or choose "
    "another --port",
    errno.EADDRNOTAVAIL: "is not an address of this machine: choose another --host",
    errno.EACCES: "needs privileges (ports below 1024): choose another --port",
}


def _cannot_listen(host: str, port: int, err: int | None = None) -> CannotListen:
    why = _WHY.get(err or 0, "cannot be bound (in use, or not an address of this machine)")
    return CannotListen(f"{host}:{port} {why}")


def _check_free(host: str, port: int) -> None:
    """Refuse an address something listens on, before gRPC tries (and logs a C-core error line)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return  # gRPC reports an unresolvable host itself
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT leftovers
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno in _WHY:
                    raise _cannot_listen(host, port, exc.errno) from exc


async def bind_and_start(server: grpc.aio.Server, host: str, port: int, tls: ServerTls | None = None) -> int:
    """Listen on host:port (0 = any free port), with TLS when given, and start; return the bound port."""
    if port:
        _check_free(host, port)
    address = f"{host}:{port}"
    try:
        if tls is not None:
            bound = server.add_secure_port(address, tls.credentials())
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpcio raises "Failed to bind to address" (no errno)
        raise _cannot_listen(host, port) from exc
    if bound == 0:
        raise _cannot_listen(host, port)
    await server.start()
    return bound


async def until_signalled(stop: Callable[[], Awaitable[None]]) -> None:
    """Wait for SIGINT/SIGTERM, then run stop()."""
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, event.set)
    await event.wait()
    await stop()
