"""Sessions and the sliding window on the real model: reuse and sliding must not change what it says.

The daemon's accounting (what is reused, prefilled, evicted) is tested on the fake engine in
tests/rpc/test_window.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc

SYSTEM = ("system", "You are a helpful AI assistant.")
QUESTIONS = ["What is the capital of France?", "And of Germany?", "Name a famous dish from there."]


@pytest_asyncio.fixture(scope="module")
async def windowed(
    default_artifact: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RunningDaemon]:
    """A daemon with a small sliding window (128 tokens, 4 sinks) so tests cross it quickly."""
    running = await start_server(
        DaemonConfig.of(
            port=0,
            model=default_artifact,
            data_dir=tmp_path_factory.mktemp("win"),
            kv_window=128,
            warmup=False,
            insecure_loopback=True,
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


async def test_session_reuse_gives_the_same_text_as_no_reuse(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    with_sessions = [t for t, _ in await conversation(daemon_stub, "same-1")]
    without = [t for t, _ in await conversation(daemon_stub, "")]
    assert with_sessions == without


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
