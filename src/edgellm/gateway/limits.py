"""Request limits (M4): body size read in bounded chunks, and completion requests in flight.

A body over the cap is a 413 (OpenAI's shape) as soon as its Content-Length or its bytes so far
say so, before it is buffered whole; a completion request past `max_concurrent` in flight is a 429
with Retry-After, the one case where retrying is right. uvicorn's own `limit_concurrency` (set in
server.py above this cap) is the backstop for connections that never reach a route.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from edgellm.gateway.errors import ApiError, send_error, too_large

LIMITED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request body, or a 413 once it is known to exceed MAX_BYTES (never read past it)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(max_bytes: int) -> ApiError:
    return too_large(
        f"the request body is larger than {max_bytes} bytes (the gateway's --max-body-bytes): "
        "shorten the messages"
    )


class ConcurrencyLimit:
    """ASGI middleware: at most LIMIT completion requests in flight (streams until their last byte)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 429 past the limit; count the request while it runs otherwise."""
        if scope["type"] != "http" or scope["path"] not in LIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            busy = ApiError(
                429,
                f"the gateway is serving {self.limit} requests already (its --max-concurrent); "
                "retry after the Retry-After seconds",
                code="too_many_requests",
                kind="rate_limit_error",
                retry_after_s=1,
            )
            await send_error(send, busy)
            return
        self.in_flight += 1  # one event loop: no lock needed between the check and the count
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
