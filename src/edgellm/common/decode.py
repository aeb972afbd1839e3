"""Undecodable requests answer INVALID_ARGUMENT, not gRPC's UNKNOWN.

Why: grpcio runs the request deserializer outside the handler, and a protobuf DecodeError there
becomes `UNKNOWN: Unexpected <class 'google.protobuf.message.DecodeError'>`; the fuzz run
(docs/reliability.md) found every RPC answering that to a mutated message. The interceptor
swaps in a deserializer that returns a marker instead of raising, and a handler of the same
shape that answers the marker with INVALID_ARGUMENT naming the method.

The open methods (health, reachable without the token) also refuse a request over
OPEN_REQUEST_BYTES before decoding it (finding L1): grpc.aio runs the deserializer on the event
loop, and an 8 MiB HealthCheckRequest of unknown fields took ~50 ms of loop time to parse, stalling
every token stream; a real health probe is a few bytes.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from edgellm.common.auth import OPEN_METHODS

OPEN_REQUEST_BYTES = 1024


@dataclass(frozen=True)
class _Undecodable:
    method: str


@dataclass(frozen=True)
class _Oversized:
    method: str
    size: int
    limit: int


def _lenient(deserialize: Callable[[bytes], Any], method: str, limit: int | None) -> Callable[[bytes], Any]:
    def read(raw: bytes) -> Any:
        if limit is not None and len(raw) > limit:
            return _Oversized(method, len(raw), limit)  # never parsed: no loop time for the sender
        try:
            return deserialize(raw)
        except DecodeError:
            return _Undecodable(method)

    return read


async def _refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """Abort the call when the lenient deserializer marked its request; else return."""
    if isinstance(request, _Oversized):
        await context.abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"request to {request.method} is {request.size} bytes; this open method takes at most "
            f"{request.limit} bytes",
        )
    if isinstance(request, _Undecodable):
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"malformed request to {request.method}: not a valid protobuf message of its request type",
        )


class StrictDecodeInterceptor(grpc.aio.ServerInterceptor):
    """Wraps unary-request handlers so a request protobuf cannot parse answers INVALID_ARGUMENT,
    and one to an open method over `open_limit` bytes answers RESOURCE_EXHAUSTED undecoded."""

    def __init__(
        self, open_methods: frozenset[str] = OPEN_METHODS, open_limit: int = OPEN_REQUEST_BYTES
    ) -> None:
        self._open_methods = open_methods
        self._open_limit = open_limit

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """The same handler, decoding leniently (streamed requests have their own decoders)."""
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        limit = self._open_limit if method in self._open_methods else None
        deserializer = _lenient(handler.request_deserializer, method, limit)
        if handler.response_streaming:
            # Any: grpc's stubs type handler behaviours with the sync ServicerContext.
            stream: Any = handler.unary_stream
            assert stream is not None

            async def streaming(
                request: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                await _refuse(request, context)
                responses = stream(request, context)
                if inspect.isawaitable(responses):  # a coroutine handler that writes with context.write
                    await responses
                elif hasattr(responses, "__aiter__"):
                    async for response in responses:
                        yield response
                else:  # a plain generator (sync handlers are allowed on an aio server)
                    for response in responses:
                        yield response

            return grpc.unary_stream_rpc_method_handler(
                streaming, request_deserializer=deserializer, response_serializer=handler.response_serializer
            )
        unary: Any = handler.unary_unary
        assert unary is not None

        async def single(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            await _refuse(request, context)
            response = unary(request, context)  # a coroutine, or the answer of a sync handler
            return await response if inspect.isawaitable(response) else response

        return grpc.unary_unary_rpc_method_handler(
            single, request_deserializer=deserializer, response_serializer=handler.response_serializer
        )
