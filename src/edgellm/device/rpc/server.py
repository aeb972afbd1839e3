"""Start and stop the daemon's gRPC server (health and reflection always on)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health

from edgellm.common.allocator import tune_for_streaming
from edgellm.common.errors import InvalidArgument
from edgellm.common.logs import get_logger
from edgellm.common.pins import daemon_tls_dir
from edgellm.common.server import Health, ServerSecurity, bind_and_start, new_server, until_signalled
from edgellm.common.tls import ClientTls, ServerTls, fingerprint
from edgellm.common.tokens import daemon_token_path, default_data_dir, host_token_path
from edgellm.device.config import DaemonConfig
from edgellm.device.core.daemon import DaemonCore
from edgellm.device.core.loading import EngineFactory
from edgellm.device.governor.platform import Platform
from edgellm.device.rpc.registration import add_device_service
from edgellm.device.rpc.service import DeviceDaemonService
from edgellm.engine.mnn import MnnEngine
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
    security: ServerSecurity
    keep_alive: asyncio.Task[None] | None = None

    @property
    def token(self) -> str | None:
        """The bearer token clients must send (None with insecure_loopback)."""
        return self.security.token

    def client_tls(self) -> ClientTls | None:
        """Client trust of exactly this daemon's certificate (None without TLS)."""
        return self.security.client_tls()

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let streams end within grace, then stop the engine."""
        if self.keep_alive is not None:
            self.keep_alive.cancel()
        await self.server.stop(grace if grace is not None else self.core.config.server.grace_seconds)
        await self.core.close()


async def start_server(
    config: DaemonConfig,
    engine_factory: EngineFactory = MnnEngine,
    on_listening: Callable[[RunningDaemon], None] | None = None,
    platform: Platform | None = None,
) -> RunningDaemon:
    """Bind, register services, start serving; load config.engine.model if given.

    `engine_factory` builds the engine for each load: MNN in the product, a fake in RPC tests.
    `platform` is the phone the governor reads and drives (`edgellm.platforms.choose_platform`:
    the real one by default, a virtual phone with --virtual-phone).
    `on_listening` is told the daemon once it serves, before the startup load (requests that
    arrive during that load wait for it: core/models.py `wait_for_load`).
    """
    tune_for_streaming()  # pushes arrive as 1 MiB messages (src/edgellm/common/allocator.py)
    security = daemon_security(config)
    server = new_server(config.server.host, security, MAX_MESSAGE_BYTES)
    core = DaemonCore(config, engine_factory, platform)
    service = DeviceDaemonService(core)
    add_device_service(service, server)
    health_state = Health(server, SERVICE_NAME, config.server.max_health_watchers)
    health_state.set(False)  # NOT_SERVING until a model is loaded
    core.on_model_change(health_state.set)
    port = await bind_and_start(server, config.server.host, config.server.port, security.tls)
    core.start()
    log.info(
        "daemon_listening",
        host=config.server.host,
        port=port,
        auth="off (insecure loopback)" if security.insecure_loopback else "token",
        tls=fingerprint(security.tls.cert.read_text()) if security.tls else "off",
    )
    running = RunningDaemon(server, core, health_state.servicer, port, security)
    if on_listening is not None:
        on_listening(running)
    if config.engine.model is not None:
        try:
            await core.load_at_start(config.engine.model)
        except BaseException:
            await running.stop(0)
            raise
    else:
        await core.restore()  # the model loaded before the last shutdown, if any
    await core.apply_saved()  # `edgellm config set` before the restart (after the load: a window
    # is checked against the loaded model's context)
    running.keep_alive = asyncio.create_task(core.keep_alive())
    return running


def daemon_security(config: DaemonConfig) -> ServerSecurity:
    """The token (explicit, file, or <data_dir>/token made on first start) and TLS the daemon uses:
    --tls-cert/--tls-key, else the self-signed pair in <data_dir>/tls (made on first start)."""
    tls: ServerTls | None = None
    if config.security.tls_cert is not None or config.security.tls_key is not None:
        if config.security.tls_cert is None or config.security.tls_key is None:
            raise InvalidArgument("--tls-cert and --tls-key go together")
        tls = ServerTls(config.security.tls_cert, config.security.tls_key)
    return ServerSecurity.resolve(
        config.server.host,
        token=config.security.auth_token,
        token_file=config.security.auth_token_file,
        default_token_file=daemon_token_path(config.store.data_dir),
        adopt=pairs_with_host(config.store.data_dir),
        tls=tls,
        insecure_loopback=config.security.insecure_loopback,
        self_signed_dir=daemon_tls_dir(config.store.data_dir),
    )


def pairs_with_host(data_dir: Path) -> tuple[Path, ...]:
    """The host service's token file to share, for the user's own daemon only (its default data dir).

    Why: on a first start with no token on either side, the shared token is made in the first of
    the two paths (tokens.ensure_token's rendezvous), which is the host's
    ``~/.config/edgellm/token``. A daemon in another data dir (a bench's, a test's, a second
    daemon) then wrote a fresh token into the user's config, and every client on the machine sent
    it to the user's real daemon, which refused it (`make demo` did, 2026-12-06).
    """
    return (host_token_path(),) if data_dir.resolve() == default_data_dir().resolve() else ()


async def serve(config: DaemonConfig, platform: Platform | None = None) -> None:
    """Run until SIGINT/SIGTERM, then stop gracefully."""
    running = await start_server(config, platform=platform)

    async def stop() -> None:
        log.info("daemon_stopping")
        await running.stop()

    await until_signalled(stop)
