"""A request protobuf cannot parse answers INVALID_ARGUMENT naming the RPC (it was UNKNOWN, found by
the fuzz run), on unary and server-streaming RPCs, with and without a token; health still works."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.rpc.conftest import StartFake, channel_to

BAD = b"\x0a\x05ab"  # field 1 claims 5 bytes, 2 remain


async def _drain(ch: grpc.aio.Channel, path: str, payload: bytes = BAD) -> None:
    call: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = ch.unary_stream(path)
    _ = [r async for r in call(payload, timeout=10)]


async def _unary(ch: grpc.aio.Channel, path: str, payload: bytes = BAD) -> bytes:
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = ch.unary_unary(path)
    return await call(payload, timeout=10)


@pytest.mark.parametrize("token", [None, "t0ken"])
async def test_undecodable_requests_answer_invalid_argument(start_fake: StartFake, token: str | None) -> None:
    running = await start_fake(**({"auth_token": token} if token else {}))
    async with channel_to(running) as ch:
        for method, streaming in (("GetStatus", False), ("DeleteArtifact", False), ("Generate", True)):
            path = f"/edgellm.v1.DeviceDaemon/{method}"
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await (_drain(ch, path) if streaming else _unary(ch, path))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            assert f"malformed request to {path}" in (err.value.details() or "")
        ok = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert ok.status == health_pb2.HealthCheckResponse.SERVING


async def test_an_oversized_request_to_the_open_health_method_is_refused_before_decoding(
    start_fake: StartFake,
) -> None:
    """L1: health needs no token, so a request over 1 KiB (here ~8 MiB of unknown fields, which
    took ~50 ms of event-loop time to parse) answers RESOURCE_EXHAUSTED; a normal probe is SERVING."""
    running = await start_fake(auth_token="t0ken")
    huge = b"\x78\x00" * ((8 << 20) // 2 - 64)  # field 15, varint 0, repeated: a valid message
    async with channel_to(running) as ch:
        for path, streaming in (
            ("/grpc.health.v1.Health/Check", False),
            ("/grpc.health.v1.Health/Watch", True),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await (_drain(ch, path, huge) if streaming else _unary(ch, path, huge))
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, path
            assert "at most 1024 bytes" in (err.value.details() or ""), path
        ok = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert ok.status == health_pb2.HealthCheckResponse.SERVING
