"""Server-sent events for OpenAI streams, with client disconnects cancelling the producer.

Why not sse-starlette: OpenAI's stream is only `data: <json>` lines and `data: [DONE]`; what we need
beyond Starlette's StreamingResponse is that a disconnect cancels generation at once, whatever
ASGI spec version the server reports (Starlette only watches for it below 2.4) — 40 lines here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event(obj: dict[str, Any]) -> bytes:
    """One SSE event carrying a JSON object."""
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


class EventStream(StreamingResponse):
    """Streams byte events; a client disconnect cancels the iterator (its `finally` cancels upstream)."""

    def __init__(self, events: AsyncGenerator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(events, status_code=200, headers=HEADERS, media_type="text/event-stream")
        self.events = events
        # Why a callback besides the generator's `finally`: closing a generator that never started
        # (the client left before the first event) does not run its `finally`.
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send events until the iterator ends or the client goes away, whichever comes first."""
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(watch)
            try:
                await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
                async for chunk in self.events:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                with anyio.CancelScope(shield=True):
                    await self.events.aclose()
                self.on_close()
                group.cancel_scope.cancel()
