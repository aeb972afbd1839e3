"""gRPC server plumbing both services share: auth, health, reflection, binding, signals."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from edgellm.common.auth import TokenAuthInterceptor, check_bind
from edgellm.common.tls import ServerTls
from edgellm.common.tokens import ensure_token, read_token_file

MAX_FRAME_BYTES = (1 << 24) - 1  # the largest frame HTTP/2 allows (RFC 9113 §4.2)


@dataclass(frozen=True)
class ServerSecurity:
    """What a server requires: a bearer token (None only with insecure_loopback) and maybe TLS."""

    token: str | None
    tls: ServerTls | None = None
    insecure_loopback: bool = False

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
    ) -> ServerSecurity:
        """Explicit token, else the token file, else DEFAULT_TOKEN_FILE (made on first start, adopting
        the first of ADOPT that exists); then check the bind."""
        if insecure_loopback:
            check_bind(host, None, tls is not None, insecure_loopback=True)
            return cls(None, tls, insecure_loopback=True)
        if not token:
            token = (
                read_token_file(token_file)
                if token_file is not None
                else ensure_token(default_token_file, adopt)
            )
        check_bind(host, token, tls is not None, insecure_loopback=False)
        return cls(token, tls)


def new_server(host: str, security: ServerSecurity, max_message_bytes: int | None = None) -> grpc.aio.Server:
    """An aio server that checks the token on every RPC but health (unless insecure_loopback)."""
    check_bind(host, security.token, security.tls is not None, security.insecure_loopback)
    # Why a large HTTP/2 frame size: the default 16 KiB frames cut each 1 MiB push chunk into 64
    # frames; allowing larger ones took bare gRPC streaming of 1 MiB messages over loopback from
    # 849 to 1,087 MB/s on the 2-core build machine (docs/benchmarks.md).
    options: list[tuple[str, int]] = [("grpc.http2.max_frame_size", MAX_FRAME_BYTES)]
    if max_message_bytes:
        options += [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
    return grpc.aio.server(
        interceptors=[TokenAuthInterceptor(security.token)] if security.token else [], options=options
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


async def bind_and_start(server: grpc.aio.Server, host: str, port: int, tls: ServerTls | None = None) -> int:
    """Listen on host:port (0 = any free port), with TLS when given, and start; return the bound port."""
    address = f"{host}:{port}"
    bound = server.add_secure_port(address, tls.credentials()) if tls else server.add_insecure_port(address)
    if bound == 0:
        raise OSError(f"could not bind {host}:{port}")
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
