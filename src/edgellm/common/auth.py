"""Bearer-token authentication: required whenever a server listens off loopback."""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from edgellm.common.errors import InvalidArgument

TOKEN_ENV = "EDGELLM_TOKEN"
# Health stays open so supervisors (runit, adb port checks) can probe without the secret.
OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_token_off_loopback(host: str, token: str | None) -> None:
    """Refuse to serve a non-loopback address without a token."""
    if not is_loopback(host) and not token:
        raise InvalidArgument(
            f"refusing to listen on {host} without authentication: set --auth-token or ${TOKEN_ENV}"
            " (or bind 127.0.0.1 and use `adb forward`)"
        )


def token_from_env() -> str | None:
    """The shared secret from the environment, if set."""
    return os.environ.get(TOKEN_ENV) or None


def client_token() -> str | None:
    """The token every client command sends (one place: a token file would be read here)."""
    return token_from_env()


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls whose `authorization` metadata is not `Bearer <token>`."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """Pass authorised calls on; answer the rest UNAUTHENTICATED."""
        if handler_call_details.method in OPEN_METHODS:
            return await continuation(handler_call_details)
        metadata = dict(handler_call_details.invocation_metadata or ())
        given = metadata.get("authorization", "")
        given_bytes = given.encode() if isinstance(given, str) else bytes(given)
        handler = await continuation(handler_call_details)
        if hmac.compare_digest(given_bytes, self._expected) or handler is None:
            return handler
        if given_bytes:
            message = "wrong token: the bearer token sent does not match this server's --auth-token"
        else:
            message = f"no token sent: this server requires one (set ${TOKEN_ENV} to its --auth-token)"
        return _deny_like(handler, message)


def _deny_like(handler: grpc.RpcMethodHandler[Any, Any], message: str) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler of the same streaming shape that answers UNAUTHENTICATED."""

    async def deny(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    kinds = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    make = kinds[(bool(handler.request_streaming), bool(handler.response_streaming))]
    return make(
        deny,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def client_metadata(token: str | None = None) -> tuple[tuple[str, str | bytes], ...]:
    """Metadata a client sends: the bearer token from the argument or client_token()."""
    token = token or client_token()
    return (("authorization", f"Bearer {token}"),) if token else ()
