"""common/periodic.py: a background task starts once, stops cleanly, and a periodic loop steps."""

from __future__ import annotations

import asyncio

from edgellm.common.periodic import BackgroundTask, every


async def test_a_background_task_runs_until_stopped_and_stops_cleanly() -> None:
    ticks: list[float] = []
    three = asyncio.Event()

    def step(now: float, elapsed: float) -> None:
        ticks.append(elapsed)
        if len(ticks) >= 3:
            three.set()

    task = BackgroundTask(lambda: every(0.01, step))
    await task.stop()  # never started: nothing to do
    task.start()
    task.start()  # already running: still one loop
    assert task.running
    await asyncio.wait_for(three.wait(), 5.0)
    await task.stop()
    assert not task.running
    seen = len(ticks)
    await asyncio.sleep(0.05)
    assert len(ticks) == seen  # stopped: no more steps
    assert all(t > 0 for t in ticks)


async def test_a_task_that_ended_can_be_started_again() -> None:
    runs: list[int] = []

    async def once() -> None:
        runs.append(1)

    task = BackgroundTask(once)
    task.start()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not task.running
    task.start()
    await task.stop()
    assert len(runs) >= 1
