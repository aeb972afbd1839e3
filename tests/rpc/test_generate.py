"""Generate over a real gRPC server with the fake engine: streaming, stops, UTF-8, sampling, refusals."""

from __future__ import annotations

import grpc
import pytest

from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc
from tests.fakes.fake_artifact import IM_END
from tests.rpc.conftest import StartFake, channel_to

CAPITAL = [common_pb2.ChatMessage(role="user", content="What is the capital of France?")]


async def collect(
    stub: device_pb2_grpc.DeviceDaemonAsyncStub, request: device_pb2.GenerateRequest
) -> list[device_pb2.GenerateResponse]:
    return [r async for r in stub.Generate(request)]


async def test_a_reply_streams_token_by_token_and_ends_with_stats(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    responses = await collect(fake_stub, device_pb2.GenerateRequest(messages=CAPITAL, max_new_tokens=48))
    assert "".join(r.text for r in responses) == " The capital of France is Paris."
    deltas, last = responses[:-1], responses[-1]
    assert len(deltas) > 5 and all(r.token_ids and not r.HasField("stats") for r in deltas)
    assert last.finish_reason == device_pb2.FINISH_REASON_STOP  # the script ends with <|im_end|>
    assert IM_END not in [t for r in responses for t in r.token_ids]  # the stop token is not streamed
    s = last.stats
    assert s.completion_tokens == sum(len(r.token_ids) for r in responses)
    assert s.prompt_tokens == s.prefilled_tokens > 10
    assert s.total_ms >= s.ttft_ms > 0 and s.queue_ms >= 0


async def test_max_new_tokens_ends_with_length(fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub) -> None:
    responses = await collect(fake_stub, device_pb2.GenerateRequest(prompt="hi", max_new_tokens=3))
    assert responses[-1].finish_reason == device_pb2.FINISH_REASON_LENGTH
    assert responses[-1].stats.completion_tokens == 3


async def test_a_stop_string_ends_generation_before_it_is_streamed(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    req = device_pb2.GenerateRequest(messages=CAPITAL, max_new_tokens=48, stop=["Paris"])
    responses = await collect(fake_stub, req)
    assert "".join(r.text for r in responses) == " The capital of France is "
    assert responses[-1].finish_reason == device_pb2.FINISH_REASON_STOP
    assert responses[-1].stop_sequence == "Paris"


async def test_utf8_split_characters_are_never_emitted_half(start_fake: StartFake) -> None:
    # Every CJK character is three byte-tokens in the fake vocabulary.
    running = await start_fake(reply="東京です。")
    async with channel_to(running) as ch:
        responses = await collect(
            device_pb2_grpc.DeviceDaemonStub(ch), device_pb2.GenerateRequest(prompt="首都", max_new_tokens=24)
        )
    deltas = [r for r in responses if r.token_ids]
    assert "".join(r.text for r in responses) == "東京です。"
    # One token per message; a character's text comes with its third byte, never before.
    assert all(len(r.token_ids) == 1 for r in deltas)
    assert [r.text for r in deltas] == [t for ch in "東京です。" for t in ("", "", ch)]


async def test_a_character_cut_by_max_new_tokens_is_dropped_but_its_tokens_reported(
    start_fake: StartFake,
) -> None:
    running = await start_fake(reply="東京")
    async with channel_to(running) as ch:
        responses = await collect(
            device_pb2_grpc.DeviceDaemonStub(ch), device_pb2.GenerateRequest(prompt="x", max_new_tokens=4)
        )
    assert "".join(r.text for r in responses) == "東"
    assert sum(len(r.token_ids) for r in responses) == 4


async def test_seeded_sampling_is_reproducible(fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub) -> None:
    def req(seed: int) -> device_pb2.GenerateRequest:
        sampling = device_pb2.SamplingParams(temperature=1.0, top_k=40, top_p=0.95, seed=seed)
        return device_pb2.GenerateRequest(prompt="Tell me a story.", max_new_tokens=24, sampling=sampling)

    def ids(responses: list[device_pb2.GenerateResponse]) -> list[int]:
        return [t for r in responses for t in r.token_ids]

    a, b, c = [ids(await collect(fake_stub, req(seed))) for seed in (1234, 1234, 99)]
    assert a == b
    assert a != c


async def test_a_client_request_id_is_echoed_and_a_missing_one_is_made_up(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    mine = await collect(
        fake_stub, device_pb2.GenerateRequest(prompt="hi", max_new_tokens=2, request_id="r-42")
    )
    assert {r.request_id for r in mine} == {"r-42"}
    made = await collect(fake_stub, device_pb2.GenerateRequest(prompt="hi", max_new_tokens=2))
    assert len({r.request_id for r in made}) == 1 and made[0].request_id


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
        (
            {
                "prompt": "hi",
                "max_new_tokens": 4,
                "sampling": device_pb2.SamplingParams(temperature=float("nan")),
            },
            "temperature",
        ),
        ({"prompt": "hi", "max_new_tokens": 4, "sampling": device_pb2.SamplingParams(top_p=2.0)}, "top_p"),
        (
            {
                "prompt": "hi",
                "max_new_tokens": 4,
                "sampling": device_pb2.SamplingParams(logit_bias={999_999: 1.0}),
            },
            "vocabulary",
        ),
        ({"prompt": "word " * 9000, "max_new_tokens": 4}, "context"),
        ({"prompt": "hi", "messages": CAPITAL, "max_new_tokens": 4}, "not both"),
        ({"messages": [common_pb2.ChatMessage(role="wizard", content="x")], "max_new_tokens": 4}, "role"),
        (
            {"messages": [common_pb2.ChatMessage(role="assistant", content="x")], "max_new_tokens": 4},
            "assistant",
        ),
        ({"prompt": "hi", "max_new_tokens": 4, "stop": ["x" * 300]}, "stop strings"),
        ({"prompt": "hi", "max_new_tokens": 4, "kv_window": 128, "n_keep": 100}, "n_keep"),
        ({"prompt": "hi", "max_new_tokens": 4, "kv_window": 100_000}, "kv_window"),
        ({"prompt": "hi", "max_new_tokens": 4, "kv_window": 16}, "kv_window"),
    ],
)
async def test_invalid_requests_get_invalid_argument(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub, request_kwargs: dict[str, object], needle: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await collect(fake_stub, device_pb2.GenerateRequest(**request_kwargs))  # type: ignore[arg-type]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in (err.value.details() or "")


async def test_a_model_that_is_not_loaded_is_not_found(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await collect(fake_stub, device_pb2.GenerateRequest(prompt="hi", max_new_tokens=4, model="llama-70b"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "llama-70b" in (err.value.details() or "")
    ok = await collect(
        fake_stub, device_pb2.GenerateRequest(prompt="hi", max_new_tokens=2, model="fake-model")
    )
    assert ok[-1].finish_reason == device_pb2.FINISH_REASON_LENGTH


async def test_a_constraint_the_daemon_cannot_enforce_is_refused_not_ignored(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    request = device_pb2.GenerateRequest(
        prompt="hi", max_new_tokens=4, constraint=device_pb2.OutputConstraint(json_object=True)
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await collect(fake_stub, request)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "constrain" in (err.value.details() or "")
