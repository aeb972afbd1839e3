"""The daemon's plain-Python core: model lifecycle, the worker, request accounting."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from common.errors import FailedPrecondition, NotFound
from common.logs import get_logger
from device_daemon.artifact import Artifact, open_artifact
from device_daemon.config import DaemonConfig
from device_daemon.engine import EngineConfig, MnnEngine
from device_daemon.generation import Event, Finished, GenerationJob, run_generation
from device_daemon.worker import EngineWorker, Ticket

log = get_logger(__name__)

VERSION = "0.1.0"


@dataclass(frozen=True)
class LoadInfo:
    """What a load measured."""

    artifact: Artifact
    load_ms: float
    warmup_ms: float


class DaemonCore:
    """Owns the engine (through the worker thread) and serves generations."""

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.worker = EngineWorker(config.queue_size)
        self.engine: MnnEngine | None = None
        self.state = "empty"  # empty | loading | idle | prefill | decode
        self.started = time.time()
        self.requests_served = 0
        self.last_ttft_ms = 0.0
        self.last_decode_tps = 0.0
        self.threads = config.threads
        self._on_model_change: list[Callable[[bool], None]] = []

    def on_model_change(self, callback: Callable[[bool], None]) -> None:
        """Register a callback told True when a model is loaded, False when none is."""
        self._on_model_change.append(callback)

    # -- model lifecycle ---------------------------------------------------------------------------
    async def load(self, path: Path) -> LoadInfo:
        """Load an artifact on the worker thread (replacing any loaded one) and warm it up."""
        artifact = open_artifact(path)

        def _load() -> LoadInfo:
            self.state = "loading"
            old, self.engine = self.engine, None
            if old is not None:
                old.close()
            try:
                engine = MnnEngine(artifact, EngineConfig(threads=self.threads))
                engine.load()
                if self.config.warmup:
                    engine.warm_up()
            except BaseException:
                self.state = "empty"
                raise
            self.engine = engine
            self.state = "idle"
            return LoadInfo(artifact, engine.load_ms, engine.warmup_ms)

        info = await asyncio.wrap_future(self.worker.call(_load))
        self._notify(True)
        return info

    async def unload(self) -> None:
        """Unload the model (waits for the running generation to finish)."""

        def _unload() -> None:
            if self.engine is not None:
                self.engine.close()
            self.engine = None
            self.state = "empty"

        await asyncio.wrap_future(self.worker.call(_unload))
        self._notify(False)

    def _notify(self, loaded: bool) -> None:
        for cb in self._on_model_change:
            cb(loaded)

    def resolve_model(self, name: str) -> None:
        """Check that a request's `model` names the loaded one (id, id prefix, or name)."""
        engine = self.engine
        if engine is None:
            raise FailedPrecondition(
                "no model is loaded; load one with `edgellm load` or start the daemon with --model"
            )
        if not name:
            return
        art = engine.artifact
        if name == art.name or (len(name) >= 8 and art.artifact_id.startswith(name)):
            return
        raise NotFound(f"model {name!r} is not loaded (loaded: {art.name} {art.artifact_id[:12]})")

    # -- generation --------------------------------------------------------------------------------
    async def generate(self, job: GenerationJob) -> AsyncIterator[Event]:
        """Queue job and yield its events; cancelling the iterator stops the engine within a token."""
        self.resolve_model("")
        ticket = Ticket(
            request_id=job.request_id or uuid.uuid4().hex,
            run=lambda t: self._run(job, t),
            loop=asyncio.get_running_loop(),
        )
        self.worker.submit(ticket)
        try:
            async for event in ticket.stream():
                yield event
        finally:
            ticket.cancel()

    def _run(self, job: GenerationJob, ticket: Ticket) -> None:
        engine = self.engine
        if engine is None:
            raise FailedPrecondition("the model was unloaded while this request waited")
        self.state = "prefill"

        def emit(event: Event) -> None:
            if self.state == "prefill":
                self.state = "decode"
            ticket.emit(event)

        try:
            finished: Finished = run_generation(engine, job, emit, ticket.cancelled)
        finally:
            self.state = "idle" if self.engine is not None else "empty"
        self.requests_served += 1
        self.last_ttft_ms = finished.stats.ttft_ms
        self.last_decode_tps = finished.stats.decode_tokens_per_second
        s = finished.stats
        log.info(
            "generate_done",
            request_id=ticket.request_id,
            finish_reason=finished.reason,
            prompt_tokens=s.prompt_tokens,
            completion_tokens=s.completion_tokens,
            ttft_ms=round(s.ttft_ms, 1),
            queue_ms=round(s.queue_ms, 1),
            prefill_tps=round(s.prefill_tokens_per_second, 1),
            decode_tps=round(s.decode_tokens_per_second, 1),
        )

    def cancel(self, request_id: str) -> bool:
        """Cancel a running or queued request."""
        return self.worker.cancel(request_id)

    async def close(self) -> None:
        """Stop the worker and free the engine."""
        await asyncio.get_running_loop().run_in_executor(None, self.worker.stop)
        if self.engine is not None:
            self.engine.close()
            self.engine = None
