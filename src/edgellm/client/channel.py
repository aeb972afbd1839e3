"""The one way every client opens a channel: address, message limits and credentials.

Every stub call on a channel from :func:`open_channel` carries the bearer token from
:func:`edgellm.common.auth.client_token` (an interceptor adds it), so no command can forget it;
how the token is found is decided in that one function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from edgellm.common.auth import client_token

# Generous both ways: a 200 KB prompt or a long chat history is far below this; the daemon
# enforces its own receive limit (edgellm.device.rpc.server.MAX_MESSAGE_BYTES).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class _ClientCallDetails(grpc.ClientCallDetails):
    def __init__(self, base: grpc.ClientCallDetails, metadata: tuple[tuple[str, str | bytes], ...]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class BearerToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds `authorization: Bearer <token>` to every call that does not carry one already."""

    def __init__(self, token: str) -> None:
        self.header = ("authorization", f"Bearer {token}")

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = tuple(details.metadata or ())
        if not any(key == "authorization" for key, _ in metadata):
            metadata += (self.header,)
        return _ClientCallDetails(details, metadata)

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        """Unary call with the token."""
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        """Server-streaming call with the token."""
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        """Client-streaming call with the token."""
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        """Bidirectional call with the token."""
        return continuation(self._details(details), requests)


def open_channel(target: str, token: str | None = None) -> grpc.Channel:
    """An insecure channel to target whose every call sends the token (argument, else client_token())."""
    channel = grpc.insecure_channel(
        target,
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
    token = token or client_token()
    return grpc.intercept_channel(channel, BearerToken(token)) if token else channel
