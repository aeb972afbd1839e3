"""SharedReading: one read per period however many callers, and a cancelled caller cancels nothing."""

from __future__ import annotations

import asyncio
import threading

from edgellm.device.telemetry.shared import SharedReading
from tests.polling import apoll


async def test_concurrent_callers_share_one_read_and_a_fresh_one_comes_after_max_age() -> None:
    now = [0.0]
    gate = threading.Event()

    calls: list[int] = []

    def read() -> int:
        calls.append(1)
        gate.wait(5)
        return len(calls)

    shared = SharedReading(read, max_age_s=0.05, clock=lambda: now[0])
    waiters = [asyncio.create_task(shared.get()) for _ in range(10)]
    await apoll(lambda: calls == [1], "the shared read started")  # the waiters are in it now
    waiters[0].cancel()  # a subscriber that leaves mid-read must not cancel the others' read
    gate.set()
    results = await asyncio.gather(*waiters[1:])
    assert results == [1] * 9 and shared.reads == 1
    assert await shared.get() == 1 and shared.reads == 1  # still fresh
    now[0] = 0.06
    assert await shared.get() == 2 and shared.reads == 2
