"""RPC-level resource bounds: capped concurrent streams, and an idle timeout and a minimum rate
on push streams.

A caller holding the token can still exhaust a phone (finding S8, S11): every open push holds a
disk reservation and a helper thread, every telemetry stream reads the sensors on its own period.
These caps answer RESOURCE_EXHAUSTED with what to change, instead of degrading every client. A
push that drips one small chunk just inside the idle timeout (finding L8) is stopped by its rate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Pace:
    """How a client stream must keep up: no silence over idle_s, and after grace_s of waiting for
    it, on average at least min_bytes_per_s over the time spent waiting (0 turns the rate off)."""

    idle_s: float
    min_bytes_per_s: float = 0.0
    grace_s: float = 60.0

    def budget(self, received: int, waited: float) -> float:
        """Seconds the next wait for the client may take before the stream is stopped."""
        if self.min_bytes_per_s <= 0:
            return self.idle_s
        allowed = max(self.grace_s, received / self.min_bytes_per_s)  # total waiting time earned
        return min(self.idle_s, allowed - waited)


async def paced(
    messages: AsyncIterator[T], pace: Pace, size: Callable[[T], int], what: str
) -> AsyncIterator[T]:
    """MESSAGES, ended with DeadlineExceeded when the peer is silent for pace.idle_s, or too slow.

    Only the wait for the peer is timed: while the server itself works (a push waiting for
    another push of the same artifact, a batch being written) no message is being awaited, so a
    slow phone disk never counts against the client. A stopped stream frees what it held (its
    slot and reservation) as its handler unwinds.
    """
    it = aiter(messages)
    received, waited = 0, 0.0
    while True:
        budget = pace.budget(received, waited)
        start = time.monotonic()
        try:
            msg = await asyncio.wait_for(anext(it), max(budget, 0.0))
        except StopAsyncIteration:
            return
        except TimeoutError:
            waited += time.monotonic() - start
            if budget < pace.idle_s:
                raise DeadlineExceeded(
                    f"{what}: {received} bytes arrived in {waited:.0f} s of waiting for the client, under "
                    f"the minimum average of {pace.min_bytes_per_s:g} bytes/s (after {pace.grace_s:g} s), "
                    "so the server stopped waiting and freed what it held; send again to resume"
                ) from None
            raise DeadlineExceeded(
                f"{what}: nothing arrived for {pace.idle_s:g} s, so the server stopped waiting and freed "
                "what it held; send again to resume"
            ) from None
        waited += time.monotonic() - start
        received += size(msg)
        yield msg


async def idle_limited(messages: AsyncIterator[T], idle_s: float, what: str) -> AsyncIterator[T]:
    """MESSAGES, ended with DeadlineExceeded when the peer sends nothing for IDLE_S seconds."""
    async for msg in paced(messages, Pace(idle_s), lambda _: 0, what):
        yield msg
