"""Undecodable requests answer INVALID_ARGUMENT, not gRPC's UNKNOWN.

Why: grpcio runs the request deserializer outside the handler, and a protobuf DecodeError there
becomes `UNKNOWN: Unexpected <class 'google.protobuf.message.DecodeError'>`; the fuzz run
(docs/reliability.md) found every RPC answering that to a mutated message. The interceptor
swaps in a deserializer that returns a marker instead of raising, and a handler of the same
shape that answers the marker with INVALID_ARGUMENT naming the method.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError


@dataclass(frozen=True)
class _Undecodable:
    method: str


def _lenient(deserialize: Callable[[bytes], Any], method: str) -> Callable[[bytes], Any]:
    def read(raw: bytes) -> Any:
        try:
            return deserialize(raw)
        except DecodeError:
            return _Undecodable(method)

    return read


def _refuse(method: str) -> str:
    return f"malformed request to {method}: not a valid protobuf message of its request type"


class StrictDecodeInterceptor(grpc.aio.ServerInterceptor):
    """Wraps unary-request handlers so a request protobuf cannot parse answers INVALID_ARGUMENT."""

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
        deserializer = _lenient(handler.request_deserializer, method)
        if handler.response_streaming:
            # Any: grpc's stubs type handler behaviours with the sync ServicerContext.
            stream: Any = handler.unary_stream
            assert stream is not None

            async def streaming(
                request: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                if isinstance(request, _Undecodable):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _refuse(method))
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
            if isinstance(request, _Undecodable):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _refuse(method))
            response = unary(request, context)  # a coroutine, or the answer of a sync handler
            return await response if inspect.isawaitable(response) else response

        return grpc.unary_unary_rpc_method_handler(
            single, request_deserializer=deserializer, response_serializer=handler.response_serializer
        )
