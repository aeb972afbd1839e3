"""Start and stop the host service's gRPC server (health and reflection always on)."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from common.auth import TokenAuthInterceptor, require_token_off_loopback
from common.logs import get_logger
from edgellm.v1 import host_pb2, host_pb2_grpc
from host_service.service import HostService

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
    require_token_off_loopback(config.host, config.auth_token)
    server = grpc.aio.server(
        interceptors=[TokenAuthInterceptor(config.auth_token)] if config.auth_token else []
    )
    # Why the ignore: Deploy/ListArtifacts stay abstract in the typed stub until implemented; the
    # generated base class answers them UNIMPLEMENTED at run time.
    service = HostService()  # type: ignore[abstract]
    host_pb2_grpc.add_HostServiceServicer_to_server(service, server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    port = server.add_insecure_port(f"{config.host}:{config.port}")
    if port == 0:
        raise OSError(f"could not bind {config.host}:{config.port}")
    await server.start()
    log.info("host_listening", host=config.host, port=port)
    return RunningHost(server, service, port)


async def serve(config: HostConfig) -> None:
    """Run until SIGINT/SIGTERM, then stop gracefully."""
    running = await start_server(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("host_stopping")
    await running.stop(config.grace_seconds)
