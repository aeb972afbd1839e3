"""Wait for a condition by polling it, never by a fixed sleep (tests-1.md item 8).

A fixed sleep either wastes time or, on a loaded CI host, is too short; a poll waits exactly as long
as needed and fails naming what did not happen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

EVERY_S = 0.005  # poll period: far below any step the tests wait for


def poll(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Block until condition() is true; TimeoutError naming WHAT after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s} s")
        time.sleep(EVERY_S)


async def apoll(condition: Callable[[], bool | Awaitable[bool]], what: str, timeout_s: float = 60.0) -> None:
    """Like poll, on the event loop; condition may be a coroutine function."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = condition()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s} s")
        await asyncio.sleep(EVERY_S)
