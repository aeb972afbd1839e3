"""Sessions with prefix reuse, and the sliding window, on the real model through the real daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from edgellm.device.config import DaemonConfig
from edgellm.device.server import RunningDaemon, start_server
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc

SYSTEM = ("system", "You are a helpful AI assistant.")
QUESTIONS = ["What is the capital of France?", "And of Germany?", "Name a famous dish from there."]


@pytest_asyncio.fixture(scope="module")
async def windowed(
    default_artifact: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RunningDaemon]:
    """A daemon with a small sliding window (128 tokens, 4 sinks) so tests cross it quickly."""
    running = await start_server(
        DaemonConfig(
            port=0,
            model=default_artifact,
            data_dir=tmp_path_factory.mktemp("win"),
            kv_window=128,
            warmup=False,
        )
    )
    yield running
    await running.stop(0)


def request(history: list[tuple[str, str]], session: str = "", n: int = 32) -> device_pb2.GenerateRequest:
    return device_pb2.GenerateRequest(
        messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in history],
        max_new_tokens=n,
        session_id=session,
    )


async def turn(
    stub: device_pb2_grpc.DeviceDaemonAsyncStub, history: list[tuple[str, str]], session: str = ""
) -> tuple[str, device_pb2.GenerateStats]:
    responses = [r async for r in stub.Generate(request(history, session))]
    return "".join(r.text for r in responses), responses[-1].stats


async def conversation(
    stub: device_pb2_grpc.DeviceDaemonAsyncStub, session: str, questions: list[str] = QUESTIONS
) -> list[tuple[str, device_pb2.GenerateStats]]:
    history = [SYSTEM]
    out = []
    for q in questions:
        history.append(("user", q))
        text, stats = await turn(stub, history, session)
        history.append(("assistant", text))
        out.append((text, stats))
    return out


async def test_session_turns_prefill_only_the_new_tokens(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    turns = await conversation(daemon_stub, "reuse-1")
    first, later = turns[0][1], [s for _, s in turns[1:]]
    assert first.prefilled_tokens == first.prompt_tokens
    for s in later:
        # Only the new user message (plus the template tokens around it) runs.
        assert 0 < s.prefilled_tokens < 30 < s.prompt_tokens
    assert "Paris" in turns[0][0]


async def test_without_a_session_every_prompt_is_prefilled(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    turns = await conversation(daemon_stub, "")
    assert all(s.prefilled_tokens == s.prompt_tokens for _, s in turns)


async def test_session_reuse_gives_the_same_text_as_no_reuse(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    with_sessions = [t for t, _ in await conversation(daemon_stub, "same-1")]
    without = [t for t, _ in await conversation(daemon_stub, "")]
    assert with_sessions == without


async def test_switching_sessions_re_prefills_and_keeps_each_conversation(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    a = [SYSTEM, ("user", QUESTIONS[0])]
    b = [SYSTEM, ("user", "Write one sentence about the sea.")]
    a_text, _ = await turn(daemon_stub, a, "switch-a")
    b_text, _ = await turn(daemon_stub, b, "switch-b")
    a += [("assistant", a_text), ("user", QUESTIONS[1])]
    _, a2 = await turn(daemon_stub, a, "switch-a")  # the cache holds b: a is rebuilt
    assert a2.prefilled_tokens == a2.prompt_tokens
    a += [("assistant", "x"), ("user", "ok")]
    b += [("assistant", b_text), ("user", "Another one.")]
    _, b2 = await turn(daemon_stub, b, "switch-b")
    assert b2.prefilled_tokens == b2.prompt_tokens


async def test_long_generation_slides_the_window_and_stays_fluent(windowed: RunningDaemon) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{windowed.port}") as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        req = device_pb2.GenerateRequest(
            messages=[
                common_pb2.ChatMessage(role="user", content="Write a long story about a dragon and a knight.")
            ],
            max_new_tokens=420,
            sampling=device_pb2.SamplingParams(repetition_penalty=1.1, logit_bias={0: -100.0, 2: -100.0}),
        )
        responses = [r async for r in stub.Generate(req)]
        status = await stub.GetStatus(device_pb2.GetStatusRequest())
    text = "".join(r.text for r in responses)
    stats = responses[-1].stats
    assert stats.completion_tokens == 420
    # 128-token window: everything beyond it was evicted, i.e. the cache turned over 2.5+ times.
    assert status.kv_window == 128
    assert stats.evicted_tokens >= stats.prompt_tokens + stats.completion_tokens - 128 > 2 * 128
    # Fluent, not garbage: mostly letters and spaces, many distinct words, no template debris.
    letters = sum(ch.isalpha() or ch.isspace() for ch in text) / len(text)
    words = text.split()
    assert letters > 0.85
    assert len(set(words)) > 0.3 * len(words)
    assert "<|im_start|>" not in text and "\ufffd" not in text


async def test_per_request_window_and_n_keep_validation(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    req = device_pb2.GenerateRequest(prompt="The history of the river is", max_new_tokens=160, kv_window=96)
    req.sampling.logit_bias[0] = -100.0
    req.sampling.logit_bias[2] = -100.0
    responses = [r async for r in daemon_stub.Generate(req)]
    s = responses[-1].stats
    assert s.evicted_tokens >= s.prompt_tokens + s.completion_tokens - 96 > 0
    for bad in (
        device_pb2.GenerateRequest(prompt="hi", max_new_tokens=4, kv_window=128, n_keep=100),
        device_pb2.GenerateRequest(prompt="hi", max_new_tokens=4, kv_window=100_000),
        device_pb2.GenerateRequest(prompt="hi", max_new_tokens=4, kv_window=16),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            _ = [r async for r in daemon_stub.Generate(bad)]
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "n_keep" in (err.value.details() or "") or "kv_window" in (err.value.details() or "")
