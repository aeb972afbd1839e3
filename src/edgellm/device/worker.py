"""The engine's one worker thread: a bounded queue of generations plus control tasks.

MNN is not thread-safe, and `forward` releases the GIL, so a dedicated thread keeps the
asyncio event loop free while the engine computes. Events cross back with
`loop.call_soon_threadsafe`. Threads do not inherit contextvars, so every job carries a copy of
its caller's context (the RPC's `rpc` and `request_id` log fields) and runs inside it.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from edgellm.common.errors import AlreadyExists, ResourceExhausted, Unavailable

T = TypeVar("T")


# A control task: the function, its future, and the caller's contextvars.
_Control = tuple[Callable[[], Any], Future[Any], contextvars.Context]


class _Closed:
    """End-of-stream marker on a ticket's event queue."""


@dataclass
class Ticket:
    """A queued generation: the worker fills `events`, the RPC drains them."""

    request_id: str
    run: Callable[[Ticket], None]
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    context: contextvars.Context = field(default_factory=contextvars.copy_context)  # the caller's
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Set when the RPC came back for the next event, i.e. the previous one was handed to gRPC.
    delivered: threading.Event = field(default_factory=threading.Event)

    def emit(self, event: object) -> None:
        """Called on the worker thread: hand an event to the event loop."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, event)

    def emit_and_wait(self, event: object, timeout: float) -> None:
        """Hand an event over and wait (bounded) until the RPC has passed it to gRPC.

        Why: on a phone's few cores MNN's threads occupy every core during a forward; sending
        the message while the next forward runs preempts them (their per-op barriers then stall
        both). Letting the send finish first costs a fraction of a millisecond per token.
        """
        self.delivered.clear()
        self.emit(event)
        self.delivered.wait(timeout)

    def cancel(self) -> None:
        """Ask the worker to stop at the next token (or skip the job if still queued)."""
        self.cancelled.set()
        self.delivered.set()

    async def stream(self) -> AsyncIterator[Any]:
        """Yield events until the worker closes the ticket; re-raise a worker exception."""
        while True:
            self.delivered.set()
            event = await self.events.get()
            if isinstance(event, _Closed):
                return
            if isinstance(event, BaseException):
                raise event
            yield event


class EngineWorker:
    """Runs generations one at a time from a bounded queue, plus unbounded control tasks."""

    def __init__(self, capacity: int, on_idle: Callable[[], object] | None = None) -> None:
        """`on_idle` runs on the worker thread whenever it has just run something and nothing waits."""
        self.capacity = capacity
        self._on_idle = on_idle
        self._jobs: deque[Ticket] = deque()
        self._control: deque[_Control] = deque()
        self._cv = threading.Condition()
        self._stopping = False
        self.active: Ticket | None = None
        self._tickets: dict[str, Ticket] = {}
        self._thread = threading.Thread(target=self._loop, name="engine-worker", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        """Generations waiting (not counting the running one)."""
        return len(self._jobs)

    def submit(self, ticket: Ticket) -> None:
        """Queue a generation or raise ResourceExhausted when the queue is full."""
        with self._cv:
            if self._stopping:
                raise Unavailable("the daemon is shutting down")
            if ticket.request_id in self._tickets:
                # Why refuse: a second live ticket under one id would make Cancel reach the wrong
                # one, and the first to finish would drop the other's entry (finding S14).
                raise AlreadyExists(
                    f"request_id {ticket.request_id!r} is already running or queued; use a fresh id"
                )
            if len(self._jobs) >= self.capacity:
                self._drop_cancelled()
            if len(self._jobs) >= self.capacity:
                raise ResourceExhausted(
                    f"request queue is full ({self.capacity} waiting); retry later or raise --queue-size"
                )
            self._jobs.append(ticket)
            self._tickets[ticket.request_id] = ticket
            self._cv.notify()

    def _drop_cancelled(self) -> None:
        """Free the slots of queued tickets already cancelled (caller holds the lock).

        Why: a queued request whose client left (a deadline, a cancel) kept its slot until the
        worker reached it, so under load live requests got RESOURCE_EXHAUSTED from a queue of
        dead ones (bench/bench_load.py: 353 of 800 refused with 8 clients and 8 slots).
        """
        live: deque[Ticket] = deque()
        for t in self._jobs:
            if not t.cancelled.is_set():
                live.append(t)
                continue
            t.emit(_Closed())
            if self._tickets.get(t.request_id) is t:
                del self._tickets[t.request_id]
        self._jobs = live

    def cancel(self, request_id: str) -> bool:
        """Cancel a queued or running request by id."""
        with self._cv:
            ticket = self._tickets.get(request_id)
        if ticket is None:
            return False
        ticket.cancel()
        return True

    def call(self, fn: Callable[[], T]) -> Future[T]:
        """Run fn on the worker thread between generations (load, unload, config)."""
        fut: Future[T] = Future()
        with self._cv:
            if self._stopping:
                raise Unavailable("the daemon is shutting down")
            self._control.append((fn, fut, contextvars.copy_context()))
            self._cv.notify()
        return fut

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel everything, finish the running token, and join the thread."""
        with self._cv:
            self._stopping = True
            for t in self._jobs:
                t.cancel()
            if self.active is not None:
                self.active.cancel()
            self._cv.notify()
        self._thread.join(timeout)

    def _has_work(self) -> bool:
        return bool(self._jobs or self._control or self._stopping)

    def _next(self) -> tuple[_Control | None, Ticket | None] | None:
        """Under the lock, once there is work: (control, None), (None, job), or None when stopping."""
        while not self._has_work():
            self._cv.wait()
        if self._control:
            return self._control.popleft(), None
        if self._jobs:
            self.active = self._jobs.popleft()
            return None, self.active
        return None  # stopping and drained

    def _loop(self) -> None:
        busy = False
        while True:
            with self._cv:
                idle = not self._has_work()
            if idle and busy and self._on_idle is not None:
                self._on_idle()  # outside the lock: submit() must not wait for it
            busy = True
            with self._cv:
                work = self._next()
            if work is None:
                break
            control, ticket = work
            if control is not None:
                self._run_control(*control)
            elif ticket is not None:
                self._run_job(ticket)
        # Drain whatever control tasks raced the stop.
        while self._control:
            _, fut, _ = self._control.popleft()
            fut.set_exception(Unavailable("the daemon is shutting down"))

    @staticmethod
    def _run_control(fn: Callable[[], Any], fut: Future[Any], ctx: contextvars.Context) -> None:
        if fut.set_running_or_notify_cancel():
            try:
                fut.set_result(ctx.run(fn))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's future
                fut.set_exception(exc)

    def _run_job(self, ticket: Ticket) -> None:
        try:
            if not ticket.cancelled.is_set():
                ticket.context.run(ticket.run, ticket)
        except BaseException as exc:  # noqa: BLE001 - handed to the RPC, which maps it
            ticket.emit(exc)
        finally:
            # Forget the id before closing the stream: a client that saw its stream end and
            # then sent Cancel for it got cancelled=True (test_cancel flaked under load).
            with self._cv:
                self.active = None
                if self._tickets.get(ticket.request_id) is ticket:
                    del self._tickets[ticket.request_id]
            ticket.emit(_Closed())
