"""The gateway's ASGI app: routes, the guard, CORS when configured, and the daemon connection's life."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import grpc
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from edgellm.client.aio import AioDaemon, connect
from edgellm.common.logs import get_logger
from edgellm.gateway import upstream
from edgellm.gateway.config import GatewayConfig
from edgellm.gateway.device import DeviceCollector, DeviceWatch
from edgellm.gateway.errors import ApiError, from_rpc_error
from edgellm.gateway.labels import exposition
from edgellm.gateway.limits import ConcurrencyLimit
from edgellm.gateway.metrics import GatewayMetrics
from edgellm.gateway.security import Guard
from edgellm.gateway.service import Completions
from edgellm.gateway.sessions import SessionMap
from edgellm.gateway.shedding import ShedWhenHot, busy_reason, exhausted_reason, hot_reason, shed_error

log = get_logger(__name__)


class Gateway:
    """What the routes share: the daemon connection, telemetry cache, metrics and sessions."""

    def __init__(self, config: GatewayConfig, daemon: AioDaemon | None = None) -> None:
        self.config = config
        self.daemon = daemon or connect(config.target, config.daemon_security)
        self.registry = CollectorRegistry()
        self.metrics = GatewayMetrics(self.registry)
        self.watch = DeviceWatch(self.daemon, config.telemetry_period_s)
        self.registry.register(DeviceCollector(self.watch))
        self.exposed = exposition(self.registry, config.device)
        self.sessions = SessionMap(config.session_capacity)
        self.completions = Completions(self.daemon, self.watch, self.metrics, self.sessions, config.limits)

    async def chat(self, request: Request) -> Response:
        """POST /v1/chat/completions."""
        return await self.completions.handle("chat", request)

    async def complete(self, request: Request) -> Response:
        """POST /v1/completions."""
        return await self.completions.handle("completion", request)

    async def models(self, request: Request) -> Response:
        """GET /v1/models: the daemon's installed and loaded models."""
        try:
            listing = await upstream.models(self.daemon)
        except grpc.aio.AioRpcError as err:
            return _rpc_error(err)
        data = [
            {
                "id": m.name or m.artifact_id,
                "object": "model",
                "created": 0,
                "owned_by": "edgellm",
                "artifact_id": m.artifact_id,
                "quantization": m.quantization,
                "loaded": m.loaded,
            }
            for m in listing.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def health(self, request: Request) -> Response:
        """GET /health: 200 with a model loaded; 503 while none is, the daemon is unreachable, or the
        device is hot and sheds work (with Retry-After). A full queue is `"status": "busy"`, still 200."""
        try:
            st = await upstream.status(self.daemon)
        except grpc.aio.AioRpcError as err:
            return _rpc_error(err)
        if not st.HasField("model"):
            return _error(
                ApiError(503, "Loading model: no model is loaded on the device", kind="unavailable_error")
            )
        shedding = self.config.shedding
        sample = self.watch.sample if self.watch.fresh else None
        shed = shed_error(sample, shedding)
        if shed is not None and shedding.when_hot:
            return _error(shed)
        hot = exhausted_reason(sample) or hot_reason(sample)
        busy = busy_reason(st)
        body: dict[str, object] = {"status": "busy" if busy else "ok", "model": st.model.name}
        if busy or hot:  # hot but not shedding (--no-shed-when-hot): said, still served
            body["reason"] = "; ".join(r for r in (hot, busy) if r)
        return JSONResponse(body)

    async def prometheus(self, request: Request) -> Response:
        """GET /metrics: Prometheus text from cached device telemetry and the gateway's counters."""
        return Response(generate_latest(self.exposed), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Read telemetry while serving; close the daemon channel at the end."""
        with contextlib.suppress(grpc.aio.AioRpcError):
            self.watch.status = await upstream.status(self.daemon)
        self.watch.start()
        log.info("gateway_ready", target=self.daemon.target, at=time.time())
        try:
            yield
        finally:
            await self.watch.stop()
            await self.daemon.close()


def _error(err: ApiError) -> Response:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers())


def _rpc_error(err: grpc.aio.AioRpcError) -> Response:
    """A daemon error on a non-completion route: the short message out, the details in the log."""
    request_id = uuid.uuid4().hex[:24]
    log.info("daemon_refused", request_id=request_id, code=err.code().name, details=err.details())
    return _error(from_rpc_error(err, request_id=request_id))


def build_app(config: GatewayConfig, daemon: AioDaemon | None = None) -> Starlette:
    """The gateway as an ASGI app (the guard runs first; CORS only for configured origins)."""
    config.validate()
    gw = Gateway(config, daemon)
    # The guard first (refusals cost nothing), then the in-flight cap on completions.
    middleware = [
        Middleware(Guard, config=config),
        Middleware(ConcurrencyLimit, limit=config.limits.max_concurrent),
        Middleware(ShedWhenHot, watch=gw.watch, shedding=config.shedding, registry=gw.registry),
    ]
    if config.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type", "x-session-id"],
            )
        )
    routes = [
        Route("/v1/chat/completions", gw.chat, methods=["POST"]),
        Route("/v1/completions", gw.complete, methods=["POST"]),
        Route("/v1/models", gw.models, methods=["GET"]),
        Route("/health", gw.health, methods=["GET"]),
        Route("/metrics", gw.prometheus, methods=["GET"]),
    ]
    app = Starlette(routes=routes, middleware=middleware, lifespan=gw.lifespan)
    app.state.gateway = gw
    return app
