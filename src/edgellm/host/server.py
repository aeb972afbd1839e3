"""Start and stop the host service's gRPC server (health and reflection always on)."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from edgellm.common.allocator import tune_for_streaming
from edgellm.common.logs import get_logger
from edgellm.common.server import Health, bind_and_start, new_server, until_signalled
from edgellm.host.service import HostService
from edgellm.v1 import host_pb2, host_pb2_grpc

log = get_logger(__name__)

SERVICE_NAME = host_pb2.DESCRIPTOR.services_by_name["HostService"].full_name


@dataclass(frozen=True)
class HostConfig:
    """Where the host service listens."""

    host: str = "127.0.0.1"
    port: int = 50052
    auth_token: str | None = None
    grace_seconds: float = 5.0


@dataclass
class RunningHost:
    """A started host server; ``port`` is the bound port (useful with port 0)."""

    server: grpc.aio.Server
    service: HostService
    port: int

    async def stop(self, grace: float | None = 5.0) -> None:
        """Stop accepting and end streams within ``grace``; running jobs finish in their thread."""
        await self.server.stop(grace)
        self.service.jobs.shutdown()


async def start_server(config: HostConfig) -> RunningHost:
    """Bind, register HostService + health + reflection, start serving."""
    tune_for_streaming()  # Deploy pushes 1 MiB buffers (src/edgellm/common/allocator.py)
    server = new_server(config.host, config.auth_token)
    service = HostService()
    host_pb2_grpc.add_HostServiceServicer_to_server(service, server)
    Health(server, SERVICE_NAME).set(True)
    port = await bind_and_start(server, config.host, config.port)
    log.info("host_listening", host=config.host, port=port)
    return RunningHost(server, service, port)


async def serve(config: HostConfig) -> None:
    """Run until SIGINT/SIGTERM, then stop gracefully."""
    running = await start_server(config)

    async def stop() -> None:
        log.info("host_stopping")
        await running.stop(config.grace_seconds)

    await until_signalled(stop)
