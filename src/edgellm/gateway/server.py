"""Run the gateway: uvicorn with its pure-Python h11 protocol (installs in Termux without a compiler)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import uvicorn

from edgellm.client.aio import AioDaemon
from edgellm.common.tokens import check_secret_file
from edgellm.gateway.app import build_app
from edgellm.gateway.config import GatewayConfig

# h11's cap on a request line plus headers (its default, stated so it stays): a larger head is a 431.
MAX_HEAD_BYTES = 16 * 1024


def uvicorn_config(config: GatewayConfig, daemon: AioDaemon | None = None) -> uvicorn.Config:
    """uvicorn settings: h11, asyncio, our structlog (no uvicorn log config), no access log, TLS
    when configured, and connection caps (M4)."""
    tls = config.tls
    if tls is not None:
        check_secret_file(tls.key)  # L11: a private key others can read is no secret
    return uvicorn.Config(
        build_app(config, daemon),
        host=config.host,
        port=config.port,
        http="h11",
        loop="asyncio",
        lifespan="on",
        log_config=None,
        access_log=False,
        server_header=False,
        ssl_certfile=str(tls.cert) if tls is not None else None,
        ssl_keyfile=str(tls.key) if tls is not None else None,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        # Why above --max-concurrent: uvicorn counts open connections (idle keep-alive ones too) and
        # answers a bare-text 503 past this; the gateway's own 429 (limits.py) should come first.
        limit_concurrency=4 * config.limits.max_concurrent + 16,
        timeout_keep_alive=5,
    )


@dataclass
class RunningGateway:
    """A gateway serving in this event loop (tests, benchmarks)."""

    server: uvicorn.Server
    task: asyncio.Task[None]
    port: int
    scheme: str = "http"

    @property
    def url(self) -> str:
        """The OpenAI base URL."""
        return f"{self.scheme}://127.0.0.1:{self.port}/v1"

    async def stop(self) -> None:
        """Stop serving and wait for the server to finish."""
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def start_gateway(config: GatewayConfig, daemon: AioDaemon | None = None) -> RunningGateway:
    """Start serving on config.port (0 = any free port) in the running loop; return once listening."""
    server = uvicorn.Server(uvicorn_config(config, daemon))
    task = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raises what stopped it
            raise RuntimeError("the gateway stopped before it started")
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return RunningGateway(server, task, port, "https" if config.tls is not None else "http")


def serve(config: GatewayConfig) -> None:
    """Serve until SIGINT/SIGTERM."""

    async def main() -> None:
        # Why build the app inside the loop: grpc.aio binds a channel to the loop it was made on, and
        # uvicorn's Server.run() would start a new loop after the app (and its channel) existed.
        await uvicorn.Server(uvicorn_config(config)).serve()

    asyncio.run(main())
