"""Bearer-token authentication for both services: every RPC but health needs the token.

Loopback is not a trust boundary on a phone (any app may connect to 127.0.0.1), so the token is
required there too. Only `--insecure-loopback` (tests, benchmarks) turns it off, and only on
loopback; off loopback the server also needs TLS, so the token never travels in cleartext.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from edgellm.common.errors import InvalidArgument
from edgellm.common.tokens import WatchedSecret

# Health stays open so supervisors (runit, adb port checks) can probe without the secret; it
# reveals only SERVING / NOT_SERVING. Reflection is not open: it needs the token like any RPC.
OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})
SCHEME = b"bearer"


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost' ('' and other names are not: safe side)."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def target_host(target: str) -> str:
    """The host part of a gRPC target ('127.0.0.1:50051', '[::1]:1', 'dns:///h:1', 'ipv4:h:1')."""
    for prefix in ("dns:///", "ipv4:", "ipv6:"):
        target = target.removeprefix(prefix)
    if target.startswith("["):
        return target[1 : target.find("]")] if "]" in target else target
    return target.rsplit(":", 1)[0] if target.count(":") == 1 else target


def check_bind(host: str, token: str | None, tls: bool, insecure_loopback: bool) -> None:
    """Refuse a listening setup that would let someone reach the RPCs without the token."""
    where = f"refusing to listen on {host!r}"
    if insecure_loopback:
        if not is_loopback(host):
            raise InvalidArgument(f"{where}: --insecure-loopback is for 127.0.0.1 / ::1 only")
        return
    if not token:
        raise InvalidArgument(f"{where} without a token: give --auth-token-file or drop --insecure-loopback")
    if not is_loopback(host) and not tls:
        raise InvalidArgument(
            f"{where} without TLS: the token would cross the network in cleartext. Give --tls-cert "
            "and --tls-key (or --tls-self-signed), or bind 127.0.0.1 and reach it through "
            "`adb forward` or an SSH tunnel"
        )


def bearer_matches(header: str | bytes, expected: bytes) -> bool:
    """RFC 6750: the scheme is case-insensitive; the token is compared in constant time."""
    raw = header.encode() if isinstance(header, str) else bytes(header)
    scheme, _, token = raw.strip().partition(b" ")
    ok_scheme = scheme.lower() == SCHEME
    return hmac.compare_digest(token.strip(), expected) and ok_scheme


def client_token() -> str | None:
    """The token every client command sends: $EDGELLM_TOKEN, else the host's, else the local daemon's file."""
    from edgellm.common.tokens import find_client_token

    found = find_client_token()
    return found.token if found else None


def client_metadata(token: str | None = None) -> tuple[tuple[str, str | bytes], ...]:
    """Metadata carrying the bearer token (argument, else client_token()); channels add it themselves."""
    token = token or client_token()
    return (("authorization", f"Bearer {token}"),) if token else ()


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls whose `authorization` metadata is not `Bearer <token>`."""

    def __init__(self, token: str | WatchedSecret) -> None:
        self._token = token  # a WatchedSecret follows `edgellm token rotate`

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
        handler = await continuation(handler_call_details)
        expected = self._token.current() if isinstance(self._token, WatchedSecret) else self._token
        if handler is None or bearer_matches(given, expected.encode()):
            return handler
        return _deny_like(handler, bool(given))


def _deny_like(handler: grpc.RpcMethodHandler[Any, Any], had_token: bool) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler of the same streaming shape that answers UNAUTHENTICATED (never decodes the request)."""
    # Why no file names here: the caller may be hostile; where tokens live is in the docs (L9).
    message = ("wrong token" if had_token else "this RPC needs the daemon's token") + (
        "; see `edgellm token --help` and docs/security.md"
    )

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
        request_deserializer=None,  # the request is never decoded (S7: no work for a caller without a token)
        response_serializer=handler.response_serializer,
    )
