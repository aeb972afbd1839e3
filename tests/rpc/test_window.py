"""Sessions and the sliding KV window, driven through the real daemon by the fake engine.

The fake keeps MNN's cache bookkeeping (erase keeps positions, a forward past the context fails),
so these check the daemon's own accounting: what is reused, prefilled, evicted and re-based.
Whether the real model stays fluent across a slide is tested in tests/device/test_sessions.py.
"""

from __future__ import annotations

import itertools

import pytest

from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc
from tests.rpc.conftest import StartFake, channel_to

SYSTEM = ("system", "You are a helpful AI assistant.")
QUESTIONS = ["What is the capital of France?", "And of Germany?", "Name a famous dish from there."]


def request(history: list[tuple[str, str]], session: str = "", n: int = 16) -> device_pb2.GenerateRequest:
    return device_pb2.GenerateRequest(
        messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in history],
        max_new_tokens=n,
        session_id=session,
    )


async def conversation(
    stub: device_pb2_grpc.DeviceDaemonAsyncStub, session: str
) -> list[tuple[str, device_pb2.GenerateStats]]:
    history, out = [SYSTEM], []
    for q in QUESTIONS:
        history.append(("user", q))
        responses = [r async for r in stub.Generate(request(history, session))]
        text = "".join(r.text for r in responses)
        history.append(("assistant", text))
        out.append((text, responses[-1].stats))
    return out


async def test_session_turns_prefill_only_the_new_tokens(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    stats = [s for _, s in await conversation(fake_stub, "reuse-1")]
    assert stats[0].prefilled_tokens == stats[0].prompt_tokens
    for prev, s in itertools.pairwise(stats):
        # The cache holds the last prompt and its reply: only the new turn's tokens run.
        assert s.prefilled_tokens == s.prompt_tokens - (prev.prompt_tokens + prev.completion_tokens) > 0


async def test_without_a_session_every_prompt_is_prefilled(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    turns = await conversation(fake_stub, "")
    assert all(s.prefilled_tokens == s.prompt_tokens for _, s in turns)


async def test_switching_sessions_re_prefills(fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub) -> None:
    a = [SYSTEM, ("user", QUESTIONS[0])]
    b = [SYSTEM, ("user", "Write one sentence about the sea.")]
    a_text = "".join([r.text async for r in fake_stub.Generate(request(a, "switch-a"))])
    _ = [r async for r in fake_stub.Generate(request(b, "switch-b"))]
    a += [("assistant", a_text), ("user", QUESTIONS[1])]
    last = [r async for r in fake_stub.Generate(request(a, "switch-a"))][-1]  # the cache holds b
    assert last.stats.prefilled_tokens == last.stats.prompt_tokens


async def test_an_edited_last_turn_cuts_the_cache_back_to_the_common_prefix(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    history = [SYSTEM, ("user", QUESTIONS[0])]
    first = [r async for r in fake_stub.Generate(request(history, "edit"))][-1].stats
    edited = [SYSTEM, ("user", "What is the capital of Italy?")]
    second = [r async for r in fake_stub.Generate(request(edited, "edit"))][-1].stats
    assert first.prefilled_tokens == first.prompt_tokens
    assert 0 < second.prefilled_tokens < second.prompt_tokens


@pytest.mark.parametrize("method", ["erase", "reprefill"])
async def test_a_long_generation_slides_the_window_and_never_passes_the_context(
    start_fake: StartFake, method: str
) -> None:
    # A 128-token window over the fake's 2,048-token context: 2,500 tokens turn the cache over ~20
    # times and, under erase, force a re-base before positions reach the context (the fake fails
    # past it, so a missed re-base would end this request with INTERNAL).
    running = await start_fake(endless=True, kv_window=128, kv_method=method, max_new_tokens_cap=4096)
    async with channel_to(running) as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        req = device_pb2.GenerateRequest(prompt="Once upon a time", max_new_tokens=2500)
        responses = [r async for r in stub.Generate(req)]
        status = await stub.GetStatus(device_pb2.GetStatusRequest())
    s = responses[-1].stats
    assert s.completion_tokens == 2500 and status.kv_window == 128
    assert s.evicted_tokens >= s.prompt_tokens + s.completion_tokens - 128
    loaded = running.core.models.loaded
    assert loaded is not None and len(loaded.engine.history) <= 128


async def test_a_per_request_window_slides_a_daemon_that_has_none(start_fake: StartFake) -> None:
    running = await start_fake(endless=True)
    async with channel_to(running) as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        req = device_pb2.GenerateRequest(
            prompt="The history of the river is", max_new_tokens=300, kv_window=96
        )
        last = [r async for r in stub.Generate(req)][-1]
        plain = [r async for r in stub.Generate(device_pb2.GenerateRequest(prompt="hi", max_new_tokens=300))][
            -1
        ]
        sample = await anext(aiter(stub.StreamTelemetry(device_pb2.StreamTelemetryRequest(interval_ms=100))))
    s = last.stats
    # Telemetry counts every eviction since start (both requests together).
    assert sample.evicted_tokens_total == s.evicted_tokens + plain.stats.evicted_tokens
    assert s.completion_tokens == 300
    assert s.evicted_tokens >= s.prompt_tokens + s.completion_tokens - 96 > 0
    assert plain.stats.evicted_tokens == 0  # the window was the request's, not the daemon's


async def test_without_a_window_the_context_ends_the_reply(start_fake: StartFake) -> None:
    running = await start_fake(endless=True)
    async with channel_to(running) as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        req = device_pb2.GenerateRequest(prompt="x" * 2000, max_new_tokens=500)  # 2,000 of 2,048 tokens
        last = [r async for r in stub.Generate(req)][-1]
    assert last.finish_reason == device_pb2.FINISH_REASON_CONTEXT
    assert last.stats.prompt_tokens + last.stats.completion_tokens == 2048
