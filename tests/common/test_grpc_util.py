"""A refused request is freed when its RPC ends, not left to Python's cyclic collector.

Found by the fuzz run (docs/reliability.md): grpc keeps the AbortError on the call's state, and
aborting inside the handler's `except` block chained the handler's exception, its frames and the
request into a reference cycle; hostile 6 MB push manifests stayed resident. Real grpc.aio server
and channel; the cyclic collector is off during the call so only reference counting can free.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import grpc
import pytest

from edgellm.common.errors import InvalidArgument
from edgellm.common.grpc_util import client_stream, server_stream, unary
from tests.polling import apoll


class Payload:
    """A request stand-in that can be weakly referenced (bytes cannot)."""

    instances: ClassVar[weakref.WeakSet[Payload]] = weakref.WeakSet()

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        Payload.instances.add(self)


class Refusing:
    """Handlers that keep the request and a large local alive in their frames, then refuse."""

    @unary
    async def Unary(self, request: Payload, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        local = Payload(request.raw * 2)  # held by this frame, i.e. by the exception's traceback
        raise InvalidArgument(f"refused {len(local.raw)} bytes")

    @server_stream
    async def Stream(
        self, request: Payload, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        local = Payload(request.raw * 2)
        yield b"first"
        raise InvalidArgument(f"refused {len(local.raw)} bytes")

    @client_stream
    async def Client(
        self, requests: AsyncIterator[Payload], context: grpc.aio.ServicerContext[Any, Any]
    ) -> bytes:
        async for message in requests:
            local = Payload(message.raw * 2)
            raise InvalidArgument(f"refused {len(local.raw)} bytes")
        return b""


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def test_refused_requests_and_their_handlers_frames_are_freed_when_the_rpc_ends(
    no_cyclic_gc: None,
) -> None:
    handlers = Refusing()
    kw: dict[str, Any] = {"request_deserializer": Payload, "response_serializer": bytes}
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "t.T",
                {
                    "Unary": grpc.unary_unary_rpc_method_handler(handlers.Unary, **kw),
                    "Stream": grpc.unary_stream_rpc_method_handler(handlers.Stream, **kw),
                    "Client": grpc.stream_unary_rpc_method_handler(handlers.Client, **kw),
                },
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    big = b"x" * (1 << 20)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            one: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = ch.unary_unary("/t.T/Unary")
            stream: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = ch.unary_stream("/t.T/Stream")
            client: grpc.aio.StreamUnaryMultiCallable[bytes, bytes] = ch.stream_unary("/t.T/Client")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await one(big, timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details() == f"refused {2 << 20} bytes"
            with pytest.raises(grpc.aio.AioRpcError) as err:
                _ = [r async for r in stream(big, timeout=10)]
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client(iter([big]), timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # 3 requests and 3 handler locals were made; reference counting alone (cyclic gc is off)
        # must free them while the server still runs, once it has finished each call (it does so
        # after the client has its status).
        with contextlib.suppress(TimeoutError):  # the assertion below says what is still held
            await apoll(lambda: not Payload.instances, "freeing the requests", timeout_s=10)
        assert [len(p.raw) for p in Payload.instances] == [], [gc.get_referrers(p) for p in Payload.instances]
    finally:
        await server.stop(None)
