"""Generation scheduling: queue a request on the worker, run it against the loaded model, stream it back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import numpy as np
import structlog

from edgellm.common.errors import FailedPrecondition
from edgellm.common.logs import get_logger
from edgellm.device.constrain import TokenGuide
from edgellm.device.constrain.guide import mask_cost
from edgellm.device.constrain.library import TokenizerCache
from edgellm.device.core.models import ModelLifecycle
from edgellm.device.core.state import EngineState
from edgellm.device.generation import Event, Finished, GenerationJob, run_generation
from edgellm.device.governor.runtime import GovernorRuntime
from edgellm.device.worker import EngineWorker, Ticket
from edgellm.engine.kv_window import WindowPolicy

log = get_logger(__name__)

# Longest the engine waits for a streamed token to reach gRPC before computing the next one.
DELIVERY_WAIT_S = 0.02
# Longest a request without a deadline waits for a model that is loading (Ollama's default load
# timeout is 5 min; 2 min covers a phone's cold load of a 1.7B model read from flash).
MAX_LOAD_WAIT_S = 120.0


def load_wait_s(time_remaining: float | None) -> float:
    """How long a request may wait for a loading model: its deadline, less a margin to answer
    UNAVAILABLE before the client gives up (a tenth, at most 1 s), capped at MAX_LOAD_WAIT_S."""
    if time_remaining is None:
        return MAX_LOAD_WAIT_S
    return max(0.0, min(MAX_LOAD_WAIT_S, time_remaining - min(1.0, time_remaining / 10)))


def request_policy(daemon: WindowPolicy, job: GenerationJob, context_length: int) -> WindowPolicy:
    """The daemon's window policy with the request's kv_window / n_keep, validated."""
    policy = daemon
    if job.kv_window or job.n_keep:
        policy = replace(
            daemon,
            window=job.kv_window or daemon.window,
            n_keep=job.n_keep or daemon.n_keep,
            chunk=0 if job.kv_window else daemon.chunk,
            tiers=() if job.kv_window else daemon.tiers,
        )
    policy.validate(context_length)
    return policy


class Scheduler:
    """Runs generations one at a time on the worker thread; counts and logs them."""

    def __init__(self, models: ModelLifecycle, worker: EngineWorker, governor: GovernorRuntime) -> None:
        self.models = models
        self.worker = worker
        self.governor = governor
        self.phase: EngineState | None = None  # PREFILL or DECODE while a request runs
        self.requests_served = 0
        self.last_ttft_ms = 0.0
        self.last_decode_tps = 0.0
        self.grammar_tokenizers = TokenizerCache()  # the loaded model's, for constrained output
        models.on_change(lambda loaded: None if loaded else self.grammar_tokenizers.clear())
        self.draft_tokens_total = 0  # speculative decoding, since start
        self.accepted_draft_tokens_total = 0
        self.evicted_tokens_total = 0  # sliding-window evictions, since start

    @property
    def busy(self) -> bool:
        """Whether a generation runs or waits."""
        return self.phase is not None or self.worker.depth > 0

    async def generate(
        self, job: GenerationJob, model: str = "", load_wait_s: float = MAX_LOAD_WAIT_S
    ) -> AsyncIterator[Event]:
        """Queue job and yield its events; cancelling the iterator stops the engine within a token.

        A model still loading is waited for, up to `load_wait_s` (then UNAVAILABLE says so). While the
        thermal headroom is exhausted under the comfort policy it is refused first (RESOURCE_EXHAUSTED).
        """
        self.governor.admit()
        await self.models.wait_for_load(load_wait_s)
        self.models.require_loaded(model)
        # The ticket carries this context to the worker thread: its logs name the request.
        with structlog.contextvars.bound_contextvars(request_id=job.request_id):
            ticket = Ticket(job.request_id, lambda t: self._run(job, t), asyncio.get_running_loop())
        self.worker.submit(ticket)
        try:
            async for event in ticket.stream():
                yield event
        finally:
            ticket.cancel()

    def cancel(self, request_id: str) -> bool:
        """Cancel a running or queued request."""
        return self.worker.cancel(request_id)

    def _run(self, job: GenerationJob, ticket: Ticket) -> None:
        """On the worker thread: one request against whatever model is loaded now."""
        loaded = self.models.loaded
        if loaded is None:
            raise FailedPrecondition("the model was unloaded while this request waited")
        cache = loaded.cache
        guide = None
        if job.constraint is not None:
            guide = TokenGuide.start(job.constraint, loaded.artifact, self.grammar_tokenizers)
        # The cache is the worker thread's alone, so setting the request's policy here is race-free.
        cache.policy = request_policy(self.models.window_policy(), job, loaded.engine.context_length)
        self.phase = EngineState.PREFILL

        def emit(event: Event) -> None:
            if self.phase == EngineState.PREFILL:
                # The first token sets TTFT: let it reach gRPC before the next forward takes
                # every core; later tokens stream while the engine computes.
                self.phase = EngineState.DECODE
                ticket.emit_and_wait(event, DELIVERY_WAIT_S)
            else:
                ticket.emit(event)

        try:
            with self.governor.generating():
                finished = run_generation(
                    cache,
                    job,
                    emit,
                    ticket.cancelled,
                    between_tokens=self.governor.between_tokens,
                    guide=guide,
                )
        finally:
            self.phase = None
        self._account(finished, guide)

    def _account(self, finished: Finished, guide: TokenGuide | None) -> None:
        s = finished.stats
        self.requests_served += 1
        self.models.last_used = time.monotonic()
        self.last_ttft_ms = s.ttft_ms
        self.last_decode_tps = s.decode_tokens_per_second
        self.draft_tokens_total += s.draft_tokens
        self.accepted_draft_tokens_total += s.accepted_draft_tokens
        self.evicted_tokens_total += s.evicted_tokens
        gov = self.governor.snapshot()
        throttled = gov.rung > 0 or gov.pacing_ms > 0  # slowed on purpose: no evidence against the choice
        self.models.observe_rate(
            s.decode_tokens_per_second, s.completion_tokens, throttled, guide is not None
        )
        log.info(
            "generate_done",
            finish_reason=finished.reason.value,
            prompt_tokens=s.prompt_tokens,
            prefilled_tokens=s.prefilled_tokens,
            evicted_tokens=s.evicted_tokens,
            completion_tokens=s.completion_tokens,
            ttft_ms=round(s.ttft_ms, 1),
            queue_ms=round(s.queue_ms, 1),
            prefill_tps=round(s.prefill_tokens_per_second, 1),
            decode_tps=round(s.decode_tokens_per_second, 1),
            **(_mask_fields(guide) if guide is not None else {}),
        )


def _mask_fields(guide: TokenGuide) -> dict[str, float]:
    """Log fields for a constrained request: what its token masks cost."""
    us = mask_cost(guide.mask_seconds)
    if us.size == 0:
        return {"constraint_ms": 0.0}
    return {
        "constraint_ms": round(guide.mask_ms, 2),
        "mask_us_p50": round(float(np.median(us)), 1),
        "mask_us_p99": round(float(np.percentile(us, 99)), 1),
    }
