"""EventStream: a client that leaves before the first event still releases the request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from starlette.types import Message

from edgellm.gateway.sse import DONE, EventStream


async def test_on_close_runs_even_when_the_events_never_started() -> None:
    started: list[bool] = []
    closed: list[bool] = []

    async def events() -> AsyncGenerator[bytes]:
        started.append(True)
        yield DONE

    async def receive() -> Message:
        return {"type": "http.disconnect"}  # the client is gone at once

    async def send(message: Message) -> None:
        await asyncio.sleep(1)  # a slow socket: the disconnect wins

    response = EventStream(events(), on_close=lambda: closed.append(True))
    await asyncio.wait_for(response({"type": "http"}, receive, send), 5)
    assert started == [] and closed == [True]


async def test_a_whole_stream_is_sent_then_closed() -> None:
    sent: list[Message] = []
    closed: list[bool] = []

    async def events() -> AsyncGenerator[bytes]:
        yield b"data: {}\n\n"
        yield DONE

    async def receive() -> Message:
        await asyncio.sleep(10)  # the client stays
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await EventStream(events(), on_close=lambda: closed.append(True))({"type": "http"}, receive, send)
    assert [m.get("body") for m in sent[1:]] == [b"data: {}\n\n", DONE, b""] and closed == [True]
