"""Start and stop the host service's gRPC server (health and reflection always on)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from edgellm.common.allocator import tune_for_streaming
from edgellm.common.logs import get_logger
from edgellm.common.pins import host_tls_dir
from edgellm.common.server import Health, ServerSecurity, bind_and_start, new_server, until_signalled
from edgellm.common.targets import resolve_target
from edgellm.common.tls import ServerTls
from edgellm.common.tokens import daemon_token_path, host_token_path
from edgellm.host.service import HostService
from edgellm.v1 import host_pb2, host_pb2_grpc

log = get_logger(__name__)

SERVICE_NAME = host_pb2.DESCRIPTOR.services_by_name["HostService"].full_name


@dataclass(frozen=True)
class HostConfig:
    """Where the host service listens."""

    host: str = "127.0.0.1"
    port: int = 50052
    auth_token: str | None = None  # None: auth_token_file, else ~/.config/edgellm/token (made on first start)
    auth_token_file: Path | None = None
    insecure_loopback: bool = False  # no token (tests); refused off loopback
    tls: ServerTls | None = None
    deploy_targets: tuple[str, ...] = ()  # daemons Deploy may push to; () = $EDGELLM_TARGET or the default
    artifacts_root: Path | None = None  # where Quantize writes (default <cache>/artifacts)
    grace_seconds: float = 5.0

    def security(self) -> ServerSecurity:
        """The token and TLS this host service requires."""
        return ServerSecurity.resolve(
            self.host,
            token=self.auth_token,
            token_file=self.auth_token_file,
            default_token_file=host_token_path(),
            adopt=(daemon_token_path(),),
            tls=self.tls,
            insecure_loopback=self.insecure_loopback,
            self_signed_dir=host_tls_dir(),
        )


@dataclass
class RunningHost:
    """A started host server; ``port`` is the bound port (useful with port 0)."""

    server: grpc.aio.Server
    service: HostService
    port: int
    security: ServerSecurity

    @property
    def token(self) -> str | None:
        """The bearer token clients must send (None with insecure_loopback)."""
        return self.security.token

    async def stop(self, grace: float | None = 5.0) -> None:
        """Stop accepting and end streams within ``grace``; running jobs finish in their thread."""
        await self.server.stop(grace)
        self.service.jobs.shutdown()


async def start_server(config: HostConfig) -> RunningHost:
    """Bind, register HostService + health + reflection, start serving."""
    tune_for_streaming()  # Deploy pushes 1 MiB buffers (src/edgellm/common/allocator.py)
    security = config.security()
    server = new_server(config.host, security)
    targets = config.deploy_targets or (resolve_target(None),)
    service = HostService(artifacts_root=config.artifacts_root, deploy_targets=targets)
    host_pb2_grpc.add_HostServiceServicer_to_server(service, server)
    Health(server, SERVICE_NAME).set(True)
    port = await bind_and_start(server, config.host, config.port, security.tls)
    log.info("host_listening", host=config.host, port=port, deploy_targets=list(targets))
    return RunningHost(server, service, port, security)


async def serve(config: HostConfig) -> None:
    """Run until SIGINT/SIGTERM, then stop gracefully."""
    running = await start_server(config)

    async def stop() -> None:
        log.info("host_stopping")
        await running.stop(config.grace_seconds)

    await until_signalled(stop)
