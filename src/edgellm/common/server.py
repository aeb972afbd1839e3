"""gRPC server plumbing both services share: auth, health, reflection, binding, signals."""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from edgellm.common.auth import TokenAuthInterceptor, require_token_off_loopback
from edgellm.common.errors import FailedPrecondition

MAX_FRAME_BYTES = (1 << 24) - 1  # the largest frame HTTP/2 allows (RFC 9113 §4.2)


def new_server(host: str, auth_token: str | None, max_message_bytes: int | None = None) -> grpc.aio.Server:
    """An aio server that refuses to run off loopback without a token, and checks it when set."""
    require_token_off_loopback(host, auth_token)
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
    return grpc.aio.server(
        interceptors=[TokenAuthInterceptor(auth_token)] if auth_token else [], options=options
    )


class Health:
    """The health service for one gRPC service name (and the server as a whole, name "")."""

    def __init__(self, server: grpc.aio.Server, service_name: str) -> None:
        self.service_name = service_name
        self.servicer = health.HealthServicer(experimental_non_blocking=True)
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


async def bind_and_start(server: grpc.aio.Server, host: str, port: int) -> int:
    """Listen on host:port (0 = any free port) and start; return the bound port."""
    if port:
        _check_free(host, port)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
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
