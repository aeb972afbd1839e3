"""Long host jobs (quantize, evaluate, scan) that outlive their client and can be watched again.

A job runs its plain-Python core in a worker thread and records progress events. Any number
of watchers replay the events so far and then follow new ones; a watcher going away (client
disconnect) does not touch the job. Finished jobs stay watchable for ``keep_seconds``.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import structlog

from edgellm.common.errors import NotFound
from edgellm.host.job_results import JobResult

log = structlog.get_logger(__name__)

Progress = Callable[[float, str], None]
JobFn = Callable[[Progress], JobResult]


@dataclass(frozen=True)
class JobUpdate:
    """One progress event of a job."""

    job_id: str
    stage: str
    fraction: float
    eta_seconds: float  # < 0 when unknown
    message: str
    done: bool = False
    result: JobResult | None = None
    error: str = ""


@dataclass
class Job:
    """A job's state: its events so far and whether it has ended."""

    job_id: str
    kind: str
    started: float = field(default_factory=time.monotonic)
    submitted: float = field(default_factory=time.monotonic)  # `started` moves when a worker takes it
    events: list[JobUpdate] = field(default_factory=list)
    stage: str = "queued"
    finished_at: float | None = None
    _changed: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def done(self) -> bool:
        """Whether the job has ended (result or error)."""
        return self.finished_at is not None

    @property
    def last(self) -> JobUpdate | None:
        """Its latest event (None before the first)."""
        with self._lock:
            return self.events[-1] if self.events else None

    @property
    def state(self) -> str:
        """queued, running, done or failed."""
        last = self.last
        if self.done:
            return "failed" if last is not None and last.error else "done"
        return "queued" if self.stage == "queued" else "running"

    def _record(self, update: JobUpdate) -> None:
        with self._lock:
            self.events.append(update)
            if len(self.events) > 2000:  # keep the first event and the recent history
                del self.events[1:1000]
            waiters = list(self._changed)
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def progress(self, fraction: float, message: str) -> None:
        """Record progress; a message ``"stage: text"`` also sets the stage."""
        if ": " in message:
            self.stage, message = message.split(": ", 1)
        fraction = min(max(fraction, 0.0), 1.0)
        elapsed = time.monotonic() - self.started
        eta = elapsed * (1 - fraction) / fraction if fraction > 0.02 else -1.0
        self._record(JobUpdate(self.job_id, self.stage, fraction, eta, message))

    async def watch(self) -> AsyncIterator[JobUpdate]:
        """Replay this job's events, then follow it until it ends."""
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            self._changed.append(entry)
        sent = 0
        try:
            while True:
                event.clear()
                with self._lock:
                    pending = self.events[sent:]
                    sent = len(self.events)
                for update in pending:
                    yield update
                    if update.done:
                        return
                await event.wait()
        finally:
            with self._lock:
                self._changed.remove(entry)


class JobManager:
    """Runs jobs one at a time (they are CPU-bound) and keeps them for re-watching."""

    def __init__(self, workers: int = 1, keep_seconds: float = 3600.0) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="host-job")
        self._jobs: dict[str, Job] = {}
        self.keep_seconds = keep_seconds

    def submit(self, kind: str, fn: JobFn) -> Job:
        """Start ``fn(progress)`` as a job; its return value is the job's result."""
        self._expire()
        job = Job(job_id=f"{kind}-{uuid.uuid4().hex[:12]}", kind=kind)
        self._jobs[job.job_id] = job
        job.progress(0.0, "queued: waiting for a worker")
        self._pool.submit(self._run, job, fn)
        log.info("job_submitted", job_id=job.job_id, kind=kind)
        return job

    def _run(self, job: Job, fn: JobFn) -> None:
        job.started = time.monotonic()
        try:
            result = fn(job.progress)
        except Exception as exc:  # a failed job reports its error to its watchers
            log.exception("job_failed", job_id=job.job_id)
            job.finished_at = time.monotonic()
            job._record(JobUpdate(job.job_id, job.stage, 1.0, 0.0, "failed", done=True, error=_describe(exc)))
            return
        job.finished_at = time.monotonic()
        job._record(JobUpdate(job.job_id, "done", 1.0, 0.0, "done", done=True, result=result))
        log.info("job_done", job_id=job.job_id, seconds=round(job.finished_at - job.started, 1))

    def get(self, job_id: str) -> Job:
        """A job by id (NotFound if unknown or expired)."""
        self._expire()
        if job_id not in self._jobs:
            raise NotFound(f"no job {job_id!r} (unknown or expired)")
        return self._jobs[job_id]

    def list(self) -> list[Job]:
        """The jobs still held (running, queued, or finished within keep_seconds), oldest first."""
        self._expire()
        return sorted(self._jobs.values(), key=lambda job: job.submitted)

    def _expire(self) -> None:
        now = time.monotonic()
        for job_id, job in list(self._jobs.items()):
            if job.finished_at is not None and now - job.finished_at > self.keep_seconds:
                del self._jobs[job_id]

    def shutdown(self) -> None:
        """Stop accepting jobs (running ones finish in their thread)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _describe(exc: BaseException) -> str:
    from edgellm.common.errors import status_for

    code, message = status_for(exc)
    if code.name == "INTERNAL":
        # A job's owner holds the host's token and runs the job on their own machine: the full
        # text helps them act, unlike a daemon's INTERNAL answer (which only names a request id).
        message = f"{type(exc).__name__}: {exc}"
    return f"{code.name}: {message}"
