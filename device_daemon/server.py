"""Start and stop the daemon's gRPC server (health and reflection always on)."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from common.auth import TokenAuthInterceptor, require_token_off_loopback
from common.logs import get_logger
from device_daemon.config import DaemonConfig
from device_daemon.core import DaemonCore
from device_daemon.service import DeviceDaemonService
from edgellm.v1 import device_pb2, device_pb2_grpc

log = get_logger(__name__)

SERVICE_NAME = device_pb2.DESCRIPTOR.services_by_name["DeviceDaemon"].full_name
MAX_MESSAGE_BYTES = 8 * 1024 * 1024


@dataclass
class RunningDaemon:
    """A started server with its core; `port` is the bound port (useful with port 0)."""

    server: grpc.aio.Server
    core: DaemonCore
    health: health.HealthServicer
    port: int
    keep_alive: asyncio.Task[None] | None = None

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let streams end within grace, then stop the engine."""
        if self.keep_alive is not None:
            self.keep_alive.cancel()
        await self.server.stop(grace if grace is not None else self.core.config.grace_seconds)
        await self.core.close()


async def start_server(config: DaemonConfig) -> RunningDaemon:
    """Bind, register services, start serving; load config.model if given."""
    require_token_off_loopback(config.host, config.auth_token)
    core = DaemonCore(config)
    server = grpc.aio.server(
        interceptors=[TokenAuthInterceptor(config.auth_token)] if config.auth_token else [],
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
    service = DeviceDaemonService(core)
    device_pb2_grpc.add_DeviceDaemonServicer_to_server(service, server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)

    def set_health(loaded: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING if loaded else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", SERVICE_NAME):
            health_servicer.set(name, status)

    set_health(False)
    core.on_model_change(set_health)
    port = server.add_insecure_port(f"{config.host}:{config.port}")
    if port == 0:
        raise OSError(f"could not bind {config.host}:{config.port}")
    await server.start()
    core.governor.start()
    log.info("daemon_listening", host=config.host, port=port)
    running = RunningDaemon(server, core, health_servicer, port)
    if config.model is not None:
        try:
            await core.load(config.model)
        except BaseException:
            await running.stop(0)
            raise
    else:
        await core.restore()  # the model loaded before the last shutdown, if any
    running.keep_alive = asyncio.create_task(core.keep_alive())
    return running


async def serve(config: DaemonConfig) -> None:
    """Run until SIGINT/SIGTERM, then stop gracefully."""
    running = await start_server(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("daemon_stopping")
    await running.stop()
