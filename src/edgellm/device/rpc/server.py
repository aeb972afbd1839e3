"""Start and stop the daemon's gRPC server (health and reflection always on)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health

from edgellm.common.allocator import tune_for_streaming
from edgellm.common.logs import get_logger
from edgellm.common.server import Health, bind_and_start, new_server, until_signalled
from edgellm.device.config import DaemonConfig
from edgellm.device.core.daemon import DaemonCore
from edgellm.device.core.models import EngineFactory
from edgellm.device.engine.mnn import MnnEngine
from edgellm.device.rpc.registration import add_device_service
from edgellm.device.rpc.service import DeviceDaemonService
from edgellm.v1 import device_pb2

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


async def start_server(config: DaemonConfig, engine_factory: EngineFactory = MnnEngine) -> RunningDaemon:
    """Bind, register services, start serving; load config.model if given.

    `engine_factory` builds the engine for each load: MNN in the product, a fake in RPC tests.
    """
    tune_for_streaming()  # pushes arrive as 1 MiB messages (src/edgellm/common/allocator.py)
    server = new_server(config.host, config.auth_token, MAX_MESSAGE_BYTES)
    core = DaemonCore(config, engine_factory)
    service = DeviceDaemonService(core)
    add_device_service(service, server)
    health_state = Health(server, SERVICE_NAME)
    health_state.set(False)  # NOT_SERVING until a model is loaded
    core.on_model_change(health_state.set)
    port = await bind_and_start(server, config.host, config.port)
    core.start()
    log.info("daemon_listening", host=config.host, port=port)
    running = RunningDaemon(server, core, health_state.servicer, port)
    if config.model is not None:
        try:
            await core.load_at_start(config.model)
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

    async def stop() -> None:
        log.info("daemon_stopping")
        await running.stop()

    await until_signalled(stop)
