"""RPC-level resource bounds: capped concurrent streams, and an idle timeout on push streams.

A caller holding the token can still exhaust a phone (finding S8, S11): every open push holds a
disk reservation and a helper thread, every telemetry stream reads the sensors on its own period.
These caps answer RESOURCE_EXHAUSTED with what to change, instead of degrading every client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import TypeVar

from edgellm.common.errors import DeadlineExceeded, ResourceExhausted

T = TypeVar("T")


class Slots:
    """At most `capacity` holders at once; one more is refused (never queued: queues hide a flood)."""

    def __init__(self, what: str, capacity: int, hint: str) -> None:
        self.what = what
        self.capacity = capacity
        self.hint = hint
        self.held = 0

    @contextmanager
    def take(self) -> Iterator[None]:
        """Hold a slot for the body; ResourceExhausted when all are held."""
        if self.held >= self.capacity:
            raise ResourceExhausted(f"{self.capacity} {self.what} are already open; {self.hint}")
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1


async def idle_limited(messages: AsyncIterator[T], idle_s: float, what: str) -> AsyncIterator[T]:
    """MESSAGES, ended with DeadlineExceeded when the peer sends nothing for IDLE_S seconds.

    Only the wait for the peer is timed: while the server itself works (a push waiting for
    another push of the same artifact, a batch being written) no message is being awaited.
    """
    it = aiter(messages)
    while True:
        try:
            msg = await asyncio.wait_for(anext(it), idle_s)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise DeadlineExceeded(
                f"{what}: nothing arrived for {idle_s:g} s, so the server stopped waiting and freed "
                "what it held; send again to resume"
            ) from None
        yield msg
