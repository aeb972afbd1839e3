"""Server-side gRPC helpers: one place that maps exceptions to status codes and binds log context.

Each RPC's logs carry `rpc` and `request_id`: the client's own `request_id` when the request has
one (GenerateRequest, CancelRequest), else a fresh id; `current_request_id()` reads it back.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog

from edgellm.common.errors import status_for, trailers_for
from edgellm.common.logs import get_logger

log = get_logger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")


LOGGED_MESSAGE_CHARS = 500
MAX_REQUEST_ID_CHARS = 128  # request and session ids: longer ones are refused (validation)


def _request_id(request: object) -> str:
    """The client's request_id if the message has a non-empty, not over-long one, else a fresh id."""
    rid = getattr(request, "request_id", "")
    ok = isinstance(rid, str) and 0 < len(rid) <= MAX_REQUEST_ID_CHARS
    return rid if ok else uuid.uuid4().hex[:12]


def current_request_id() -> str:
    """The request_id bound to this RPC's logs (a fresh one outside an RPC)."""
    rid = structlog.contextvars.get_contextvars().get("request_id")
    return rid if isinstance(rid, str) and rid else uuid.uuid4().hex[:12]


Failure = tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]


def _failure(exc: BaseException, rpc: str) -> Failure:
    """The status and trailers for a handler's exception, logged (call inside the `except` block)."""
    code, message = status_for(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.exception("rpc_failed", rpc=rpc)
        message = f"{message}, request id {current_request_id()}: the server's log has the details"
    else:
        # Truncated: a refusal may quote what the client sent, and the log must stay small.
        log.info("rpc_refused", rpc=rpc, code=code.name, message=message[:LOGGED_MESSAGE_CHARS])
    return code, message, trailers_for(exc)


# Why the wrappers set the status and return instead of `context.abort()`: grpc keeps the
# AbortError that abort raises on the call's state, and its traceback holds the handler frames
# (the context, the request iterator's last message, and, raised inside `except`, the handler's
# exception with every frame of its own traceback): a reference cycle that only Python's full
# collection frees. Under fuzzing hostile 6 MB push manifests stayed resident by the dozen MiB
# (docs/reliability.md). A status set on the context ends the call the same way for the client
# (grpc discards the response of a non-OK call), and everything dies with the handler.


def _refuse(context: grpc.aio.ServicerContext[Any, Any], failure: Failure) -> Any:
    """End the call with `failure` by setting its status (and trailers); grpc drops the (None) response."""
    context.set_code(failure[0])
    context.set_details(failure[1])
    if failure[2]:
        context.set_trailing_metadata(failure[2])


def unary(
    fn: Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]],
) -> Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
    """Wrap a unary handler: bind the request id to the logs and map exceptions to statuses."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
        with structlog.contextvars.bound_contextvars(rpc=fn.__name__, request_id=_request_id(request)):
            try:
                return await fn(self, request, context)
            except (grpc.aio.AbortError, GeneratorExit):
                raise
            except Exception as exc:  # noqa: BLE001 - the one place errors become statuses
                failure = _failure(exc, fn.__name__)
            return _refuse(context, failure)  # type: ignore[no-any-return]

    return wrapper


def server_stream(
    fn: Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]],
) -> Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]]:
    """Wrap a server-streaming handler the same way."""

    @functools.wraps(fn)
    async def wrapper(
        self: Any, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Resp]:
        with structlog.contextvars.bound_contextvars(rpc=fn.__name__, request_id=_request_id(request)):
            try:
                async for item in fn(self, request, context):
                    yield item
                return
            except (grpc.aio.AbortError, GeneratorExit):
                raise
            except Exception as exc:  # noqa: BLE001 - the one place errors become statuses
                failure = _failure(exc, fn.__name__)
            _refuse(context, failure)

    return wrapper


def client_stream(
    fn: Callable[[Any, AsyncIterator[Req], grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]],
) -> Callable[[Any, AsyncIterator[Req], grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
    """Wrap a client-streaming handler (request iterator in, one response out) the same way."""

    @functools.wraps(fn)
    async def wrapper(
        self: Any, requests: AsyncIterator[Req], context: grpc.aio.ServicerContext[Any, Any]
    ) -> Resp:
        # grpc's request iterator hands out one async generator (`aiter` returns the same one the
        # handler iterates). Why close it: a handler that stops reading early (a refused manifest)
        # leaves it suspended holding the last message, in a cycle with its receiver that
        # Python's collector does not free (tests/common/test_grpc_util.py).
        messages = aiter(requests)
        with structlog.contextvars.bound_contextvars(rpc=fn.__name__, request_id=uuid.uuid4().hex[:12]):
            try:
                return await fn(self, requests, context)
            except (grpc.aio.AbortError, GeneratorExit):
                raise
            except Exception as exc:  # noqa: BLE001 - the one place errors become statuses
                failure = _failure(exc, fn.__name__)
            finally:
                aclose = getattr(messages, "aclose", None)
                if aclose is not None:
                    await aclose()
            return _refuse(context, failure)  # type: ignore[no-any-return]

    return wrapper
