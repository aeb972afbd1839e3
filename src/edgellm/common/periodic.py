"""A background asyncio task with a clean start and stop, and a loop that steps every period.

The governor's control loop and the gateway's device watch each wrote the same start (create a
task on the running loop) and stop (cancel it, await it, swallow its CancelledError).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable


class BackgroundTask:
    """Runs `run()` as one task on the running loop between `start()` and `stop()`."""

    def __init__(self, run: Callable[[], Awaitable[None]]) -> None:
        self._run = run
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """Whether the task was started and has not finished."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the task on the running event loop (a second start while it runs does nothing)."""
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._wrap())

    async def _wrap(self) -> None:
        await self._run()

    async def stop(self) -> None:
        """Cancel the task and wait until it has stopped (its cancellation is not an error)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def every(period_s: float, step: Callable[[float, float], None]) -> None:
    """Call `step(now, elapsed_s)` every `period_s` seconds (monotonic clock) until cancelled."""
    last = time.monotonic()
    while True:
        await asyncio.sleep(period_s)
        now = time.monotonic()
        step(now, now - last)
        last = now
