"""The engine worker thread on its own: queue bound, cancellation, control tasks, log context."""

from __future__ import annotations

import asyncio
import threading

import pytest
import structlog

from edgellm.common.errors import ResourceExhausted, Unavailable
from edgellm.device.worker import EngineWorker, Ticket
from tests.polling import apoll


def ticket(request_id: str, run: object) -> Ticket:
    return Ticket(request_id, run, asyncio.get_running_loop())  # type: ignore[arg-type]


async def test_a_job_runs_in_its_callers_log_context() -> None:
    worker = EngineWorker(capacity=2)
    seen: dict[str, object] = {}

    def run(t: Ticket) -> None:
        seen.update(structlog.contextvars.get_contextvars(), thread=threading.current_thread().name)
        t.emit("done")

    try:
        with structlog.contextvars.bound_contextvars(rpc="Generate", request_id="r-7"):
            t = ticket("r-7", run)
        worker.submit(t)
        assert [e async for e in t.stream()] == ["done"]
        # Control tasks (loads, reloads) carry their caller's context too.
        with structlog.contextvars.bound_contextvars(rpc="LoadModel"):
            rpc = await asyncio.wrap_future(
                worker.call(lambda: structlog.contextvars.get_contextvars()["rpc"])
            )
    finally:
        worker.stop()
    assert seen == {"rpc": "Generate", "request_id": "r-7", "thread": "engine-worker"}
    assert rpc == "LoadModel"


async def test_the_queue_is_bounded_and_a_cancelled_queued_job_never_runs() -> None:
    worker = EngineWorker(capacity=1)
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def run(t: Ticket) -> None:
        ran.append(t.request_id)
        started.set()
        release.wait(5)

    try:
        first, second = ticket("a", run), ticket("b", run)
        worker.submit(first)
        assert await asyncio.to_thread(started.wait, 5)  # "a" is running, so "b" waits in the queue
        worker.submit(second)
        with pytest.raises(ResourceExhausted, match="queue is full"):
            worker.submit(ticket("c", run))
        assert worker.depth == 1
        assert worker.cancel("b") and not worker.cancel("nope")
        release.set()
        assert [e async for e in first.stream()] == []
        assert [e async for e in second.stream()] == []
    finally:
        worker.stop()
    assert ran == ["a"]


async def test_an_exception_in_a_job_reaches_its_stream_and_the_worker_survives() -> None:
    worker = EngineWorker(capacity=2)

    def boom(t: Ticket) -> None:
        raise ValueError("invariant broken")

    try:
        t = ticket("x", boom)
        worker.submit(t)
        with pytest.raises(ValueError, match="invariant"):
            _ = [e async for e in t.stream()]
        assert await asyncio.wrap_future(worker.call(lambda: 42)) == 42
    finally:
        worker.stop()


async def test_after_stop_nothing_is_accepted() -> None:
    worker = EngineWorker(capacity=2)
    worker.stop()
    with pytest.raises(Unavailable):
        worker.call(lambda: None)
    with pytest.raises(Unavailable):
        worker.submit(ticket("late", lambda t: None))


async def test_a_cancelled_queued_job_frees_its_slot_for_the_next_request() -> None:
    worker = EngineWorker(capacity=1)
    started, release = threading.Event(), threading.Event()

    def run(t: Ticket) -> None:
        started.set()
        release.wait(5)

    try:
        worker.submit(ticket("a", run))
        assert await asyncio.to_thread(started.wait, 5)
        gone = ticket("b", run)
        worker.submit(gone)
        gone.cancel()  # its client left (deadline or cancel) while it waited
        worker.submit(ticket("c", run))  # takes the dead ticket's slot at once
        assert worker.depth == 1
        assert [e async for e in gone.stream()] == []  # the dead ticket's stream is closed
    finally:
        release.set()
        worker.stop()


async def test_on_idle_runs_once_the_queue_drains_not_between_queued_jobs() -> None:
    """The daemon gives freed memory back here (common/allocator.py), never while work waits."""
    idle: list[int] = []
    ran: list[str] = []
    gate = threading.Event()
    worker = EngineWorker(capacity=4, on_idle=lambda: idle.append(len(ran)))

    def run(t: Ticket) -> None:
        gate.wait(10)
        ran.append(t.request_id)
        t.emit("done")

    try:
        tickets = [ticket(f"r{i}", run) for i in range(3)]
        for t in tickets:
            worker.submit(t)
        gate.set()
        for t in tickets:
            assert [e async for e in t.stream()] == ["done"]
        # Why wait: the last job's "done" reaches this task before the worker thread looks at its
        # queue; a control task sent at once would still be waiting then, so (rightly) no on_idle
        # would run after the jobs, and the count below would never reach 2 (CI, 2026-12-05).
        await apoll(lambda: len(idle) >= 1, "on_idle after the jobs")
        await asyncio.wrap_future(worker.call(lambda: None))  # a control task ends busy too
        # Why poll: on_idle runs on the worker thread after the control task's future resolved; a
        # fixed 1 s window missed it on a loaded 2-core machine.
        await apoll(lambda: len(idle) >= 2, "on_idle after the control task")
    finally:
        worker.stop()
    assert idle == [3, 3]  # after the three jobs (not between them), and after the control task
