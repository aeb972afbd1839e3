"""The real daemon over real gRPC with the real default model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgellm.device.config import DaemonConfig
from edgellm.device.server import RunningDaemon, start_server
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc

CAPITAL = [common_pb2.ChatMessage(role="user", content="What is the capital of France?")]


def chat(content: str, **kw: object) -> device_pb2.GenerateRequest:
    return device_pb2.GenerateRequest(
        messages=[common_pb2.ChatMessage(role="user", content=content)],
        **kw,  # type: ignore[arg-type]
    )


async def collect(
    stub: device_pb2_grpc.DeviceDaemonAsyncStub, request: device_pb2.GenerateRequest
) -> list[device_pb2.GenerateResponse]:
    return [r async for r in stub.Generate(request)]


async def test_greedy_capital_streams_paris_with_stats(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    responses = await collect(daemon_stub, device_pb2.GenerateRequest(messages=CAPITAL, max_new_tokens=48))
    text = "".join(r.text for r in responses)
    assert "Paris" in text
    assert len(responses) > 2  # streamed, not one blob
    last = responses[-1]
    assert last.finish_reason in (device_pb2.FINISH_REASON_STOP, device_pb2.FINISH_REASON_LENGTH)
    assert all(not r.HasField("stats") for r in responses[:-1])
    s = last.stats
    ids = [t for r in responses for t in r.token_ids]
    assert s.completion_tokens == len(ids) > 0
    assert s.prompt_tokens > 10 and s.prefilled_tokens == s.prompt_tokens
    assert s.ttft_ms > 0 and s.prefill_tokens_per_second > 0 and s.decode_tokens_per_second > 0
    assert s.total_ms >= s.ttft_ms


async def test_seeded_sampling_is_reproducible(daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub) -> None:
    def req(seed: int) -> device_pb2.GenerateRequest:
        return chat(
            "Tell me a short story about a cat.",
            max_new_tokens=24,
            sampling=device_pb2.SamplingParams(temperature=1.0, top_k=40, top_p=0.95, seed=seed),
        )

    a = "".join(r.text for r in await collect(daemon_stub, req(1234)))
    b = "".join(r.text for r in await collect(daemon_stub, req(1234)))
    c = "".join(r.text for r in await collect(daemon_stub, req(99)))
    assert a == b
    assert a != c


async def test_utf8_split_characters_are_never_emitted_half(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    # Japanese text: most characters take several byte-level tokens in this vocabulary.
    responses = await collect(
        daemon_stub, device_pb2.GenerateRequest(prompt="日本の首都は東京です。日本の", max_new_tokens=24)
    )
    deltas = [r for r in responses if r.token_ids]
    text = "".join(r.text for r in responses)
    assert any(ord(ch) > 127 for ch in text)
    assert "\ufffd" not in text
    # Some token produced no text on its own: its character was completed by a later token.
    assert any(r.token_ids and not r.text for r in deltas)


async def test_stop_string_ends_generation(daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub) -> None:
    responses = await collect(
        daemon_stub, device_pb2.GenerateRequest(messages=CAPITAL, max_new_tokens=48, stop=["Paris"])
    )
    text = "".join(r.text for r in responses)
    assert "Paris" not in text
    assert responses[-1].finish_reason == device_pb2.FINISH_REASON_STOP
    assert responses[-1].stop_sequence == "Paris"


async def test_cancel_mid_stream_frees_the_engine(daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub) -> None:
    call = daemon_stub.Generate(
        chat("Write a very long essay about the history of Europe.", max_new_tokens=1500)
    )
    got = 0
    async for _ in call:
        got += 1
        if got == 3:
            call.cancel()
            break
    # The next request gets the engine at once: its queue time is small, not the 1500-token tail.
    responses = await collect(daemon_stub, device_pb2.GenerateRequest(messages=CAPITAL, max_new_tokens=8))
    assert responses[-1].stats.queue_ms < 2000
    status = await daemon_stub.GetStatus(device_pb2.GetStatusRequest())
    assert status.engine_state == device_pb2.ENGINE_STATE_IDLE


async def test_deadline_stops_generation(daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in daemon_stub.Generate(
            chat("Write a very long essay.", max_new_tokens=1500), timeout=0.5
        ):
            pass
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    responses = await collect(daemon_stub, device_pb2.GenerateRequest(messages=CAPITAL, max_new_tokens=4))
    assert responses[-1].stats.queue_ms < 2000


@pytest.mark.parametrize(
    ("request_kwargs", "needle"),
    [
        ({}, "no prompt"),
        ({"prompt": "hi", "max_new_tokens": 0}, "max_new_tokens"),
        ({"prompt": "hi", "max_new_tokens": 100_000}, "cap"),
        (
            {"prompt": "hi", "max_new_tokens": 4, "sampling": device_pb2.SamplingParams(temperature=-0.5)},
            "temperature",
        ),
        ({"prompt": "hi", "max_new_tokens": 4, "sampling": device_pb2.SamplingParams(top_p=2.0)}, "top_p"),
        ({"prompt": "word " * 9000, "max_new_tokens": 4}, "context"),
        ({"prompt": "hi", "messages": CAPITAL, "max_new_tokens": 4}, "not both"),
        ({"messages": [common_pb2.ChatMessage(role="wizard", content="x")], "max_new_tokens": 4}, "role"),
    ],
)
async def test_invalid_requests_get_invalid_argument(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub, request_kwargs: dict[str, object], needle: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await collect(daemon_stub, device_pb2.GenerateRequest(**request_kwargs))  # type: ignore[arg-type]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in (err.value.details() or "")


async def test_unknown_model_is_not_found(daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await collect(
            daemon_stub, device_pb2.GenerateRequest(prompt="hi", max_new_tokens=4, model="llama-70b")
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_status_reports_the_loaded_model(daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub) -> None:
    st = await daemon_stub.GetStatus(device_pb2.GetStatusRequest())
    assert st.HasField("model") and st.model.loaded
    assert len(st.model.artifact_id) == 64
    assert st.context_tokens == 8192 and st.threads >= 1 and st.load_ms > 0


async def test_full_queue_is_resource_exhausted(default_artifact: Path, tmp_path: Path) -> None:
    running = await start_server(
        DaemonConfig(port=0, model=default_artifact, data_dir=tmp_path, queue_size=1, warmup=False)
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = device_pb2_grpc.DeviceDaemonStub(channel)
            long = chat("Write a very long essay about rivers.", max_new_tokens=400)
            first = stub.Generate(long)
            await first.read()  # running
            second = stub.Generate(long)  # waits in the queue (capacity 1)
            await asyncio.sleep(0.3)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await collect(stub, long)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "queue is full" in (err.value.details() or "")
            first.cancel()
            second.cancel()
    finally:
        await running.stop(0)


async def test_health_is_not_serving_until_a_model_is_loaded(default_artifact: Path, tmp_path: Path) -> None:
    running: RunningDaemon = await start_server(DaemonConfig(port=0, data_dir=tmp_path, warmup=False))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            stub = device_pb2_grpc.DeviceDaemonStub(channel)

            async def state() -> int:
                reply: health_pb2.HealthCheckResponse = await health.Check(
                    health_pb2.HealthCheckRequest(service="")
                )
                return int(reply.status)

            assert await state() == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await collect(stub, device_pb2.GenerateRequest(prompt="hi", max_new_tokens=2))
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            await running.core.load(default_artifact)
            assert await state() == health_pb2.HealthCheckResponse.SERVING
            await running.core.unload()
            assert await state() == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await running.stop(0)


async def test_reflection_lists_the_services(daemon: RunningDaemon) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)

        async def one() -> reflection_pb2.ServerReflectionResponse:
            async for r in stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            ):
                return r
            raise AssertionError("no reflection answer")

        names = {s.name for s in (await one()).list_services_response.service}
    assert {"edgellm.v1.DeviceDaemon", "grpc.health.v1.Health"} <= names


async def test_off_loopback_requires_a_token_and_checks_it(default_artifact: Path, tmp_path: Path) -> None:
    from edgellm.common.errors import InvalidArgument

    with pytest.raises(InvalidArgument):
        await start_server(DaemonConfig(host="0.0.0.0", port=0, data_dir=tmp_path))
    running = await start_server(DaemonConfig(port=0, data_dir=tmp_path, auth_token="s3cret", warmup=False))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = device_pb2_grpc.DeviceDaemonStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.GetStatus(device_pb2.GetStatusRequest())
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await collect(stub, device_pb2.GenerateRequest(prompt="hi", max_new_tokens=1))
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            ok = await stub.GetStatus(
                device_pb2.GetStatusRequest(), metadata=(("authorization", "Bearer s3cret"),)
            )
            assert ok.version
    finally:
        await running.stop(0)
