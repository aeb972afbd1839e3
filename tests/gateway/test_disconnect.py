"""A client that goes away stops generation on the device (stream cancel reaches the engine)."""

from __future__ import annotations

import asyncio
import time

from openai.types.chat import ChatCompletionMessageParam

from edgellm.device.rpc.server import RunningDaemon
from tests.fakes.fake_engine import FakeEngine
from tests.gateway.conftest import StartDaemon, StartGateway, keyed_http, sdk

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Talk forever."}]


async def _engine_stops(daemon: RunningDaemon, within_s: float = 3.0) -> int:
    """Wait until the device is idle and its engine has stopped stepping; return the forward count."""
    loaded = daemon.core.models.loaded
    assert loaded is not None and isinstance(loaded.engine, FakeEngine)
    engine = loaded.engine
    deadline = time.monotonic() + within_s
    while daemon.core.scheduler.busy:
        assert time.monotonic() < deadline, "the device kept generating after the client left"
        await asyncio.sleep(0.02)
    settled = engine.forwards
    await asyncio.sleep(0.2)
    assert engine.forwards == settled
    return int(settled)


async def test_closing_a_stream_cancels_generation_on_the_device(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    daemon = await start_daemon(endless=True, step_s=0.01)
    gw = await start_gw(daemon)
    body = {"model": "fake-model", "messages": QUESTION, "max_tokens": 2000, "stream": True}
    async with (
        keyed_http(gw) as http,
        http.stream("POST", f"http://127.0.0.1:{gw.port}/v1/chat/completions", json=body) as response,
    ):
        lines = response.aiter_lines()
        got = [await anext(lines) for _ in range(5)]
        assert any(line.startswith("data: {") for line in got)
        assert daemon.core.scheduler.busy
    forwards = await _engine_stops(daemon)
    assert forwards < 1000  # far from the 2000 tokens asked for


async def test_abandoning_a_whole_answer_cancels_generation_on_the_device(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    daemon = await start_daemon(endless=True, step_s=0.01)
    gw = await start_gw(daemon)
    async with sdk(gw) as c:
        task = asyncio.create_task(
            c.chat.completions.create(model="fake-model", messages=QUESTION, max_tokens=2000)
        )
        for _ in range(500):  # until the device generates (a loaded host can take a while)
            if daemon.core.scheduler.phase is not None:
                break
            await asyncio.sleep(0.01)
        assert daemon.core.scheduler.phase is not None
        task.cancel()  # the SDK closes its connection
        await asyncio.gather(task, return_exceptions=True)
    await _engine_stops(daemon)


async def test_the_gateway_serves_the_next_request_after_a_disconnect(
    start_daemon: StartDaemon, start_gw: StartGateway
) -> None:
    daemon = await start_daemon(endless=True, step_s=0.005)
    gw = await start_gw(daemon)
    async with sdk(gw) as c:
        stream = await c.chat.completions.create(
            model="fake-model", messages=QUESTION, max_tokens=2000, stream=True
        )
        async for _ in stream:
            break
        await stream.close()
        answer = await c.chat.completions.create(
            model="fake-model", messages=QUESTION, max_tokens=3, temperature=0
        )
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == 3
