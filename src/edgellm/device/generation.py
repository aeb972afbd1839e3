"""One generation, run on the worker thread: template, prefill, sample, stream, stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from edgellm.common.errors import InvalidArgument
from edgellm.common.logs import get_logger
from edgellm.device.engine import MnnEngine
from edgellm.device.kv_cache import ContextFull, FeedStats, KvCache
from edgellm.device.sampler import Sampler, SamplingConfig
from edgellm.device.text import StopMatcher, Utf8Stream

log = get_logger(__name__)


@dataclass(frozen=True)
class GenerationJob:
    """A validated request, ready for the engine."""

    request_id: str
    prompt: str | None
    messages: tuple[tuple[str, str], ...]
    max_new_tokens: int
    sampling: SamplingConfig
    stop: tuple[str, ...] = ()
    session_id: str = ""
    received_at: float = field(default_factory=time.perf_counter)
    kv_window: int = 0  # per-request sliding window; 0 = the daemon's
    n_keep: int = 0  # per-request protected prefix; 0 = the daemon's


@dataclass(frozen=True)
class Delta:
    """Newly complete text and the token ids that produced it."""

    text: str
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class Stats:
    """Measured figures for one finished request."""

    prompt_tokens: int
    completion_tokens: int
    ttft_ms: float
    prefill_tokens_per_second: float
    decode_tokens_per_second: float
    prefilled_tokens: int
    evicted_tokens: int
    queue_ms: float
    total_ms: float


@dataclass(frozen=True)
class Finished:
    """The last event of a request."""

    reason: str  # "stop" | "length" | "cancelled" | "context"
    stats: Stats
    stop_sequence: str = ""


Event = Delta | Finished
Emit = Callable[[Event], None]


def render_prompt(engine: MnnEngine, job: GenerationJob, sliding: bool = False) -> list[int]:
    """Token ids for the request: chat template on the device, or raw text.

    A prompt as long as the context is refused unless the request slides a window (the cache
    then keeps the protected start and the most recent tokens while the prompt is fed).
    """
    text = engine.apply_chat_template(job.messages) if job.messages else (job.prompt or "")
    ids = engine.encode(text)
    if not ids:
        raise InvalidArgument("the prompt is empty after tokenization")
    if len(ids) >= engine.context_length and not sliding:
        raise InvalidArgument(
            f"prompt is {len(ids)} tokens; the model's context is {engine.context_length}: shorten it "
            "(leave room for at least one new token), or slide a KV window over it (request kv_window, "
            "`--kv-window N`: only the start and the last N tokens stay in view)"
        )
    return ids


def run_generation(
    cache: KvCache,
    job: GenerationJob,
    emit: Emit,
    cancelled: threading.Event,
    between_tokens: Callable[[], None] | None = None,
) -> Finished:
    """Generate for job, emitting Delta events and finally one Finished event (also returned)."""
    engine = cache.engine
    started = time.perf_counter()
    ids = render_prompt(engine, job, cache.policy.sliding)
    job.sampling.validate(engine.vocab_size)
    sampler = Sampler(job.sampling)
    sampler.observe_prompt(ids)
    text = Utf8Stream()
    stops = StopMatcher(list(job.stop))
    max_new = (
        job.max_new_tokens
        if cache.policy.sliding
        else min(job.max_new_tokens, engine.context_length - len(ids))
    )

    feed = FeedStats()
    t_prefill = time.perf_counter()
    logits = cache.feed(cache.begin(job.session_id, ids, feed), feed)
    t_first = 0.0
    generated = 0
    reason, stop_sequence = "length", ""
    pending_ids: list[int] = []
    while generated < max_new:
        if cancelled.is_set():
            reason = "cancelled"
            break
        token = sampler.sample(logits)
        if generated == 0:
            t_first = time.perf_counter()
        if token in engine.stop_ids:
            reason = "stop"
            break
        generated += 1
        sampler.observe(token)
        pending_ids.append(token)
        result = stops.push(text.push(engine.token_bytes(token)))
        if result.text or result.stop is not None or not stops.stops:
            emit(Delta(result.text, tuple(pending_ids)))
            pending_ids = []
        if result.stop is not None:
            reason, stop_sequence = "stop", result.stop
            break
        if generated >= max_new:
            break
        if between_tokens is not None:
            between_tokens()
        try:
            logits = cache.step(token, feed)
        except ContextFull:
            reason = "context"
            break
    if reason != "stop" or not stop_sequence:
        tail = stops.push(text.flush()).text + stops.flush() if reason != "cancelled" else ""
        if tail or pending_ids:
            emit(Delta(tail, tuple(pending_ids)))
    if not t_first:
        t_first = time.perf_counter()
    if reason == "length" and generated < job.max_new_tokens:
        reason = "context"
    done = time.perf_counter()
    prefill_done = feed.prefilled + feed.recomputed
    prefill_s = max(t_first - t_prefill, 1e-9)
    decode_s = done - t_first
    stats = Stats(
        prompt_tokens=len(ids),
        completion_tokens=generated,
        ttft_ms=(t_first - job.received_at) * 1000,
        prefill_tokens_per_second=prefill_done / prefill_s if prefill_done else 0.0,
        decode_tokens_per_second=(generated - 1) / decode_s if generated > 1 and decode_s > 0 else 0.0,
        prefilled_tokens=feed.prefilled,
        evicted_tokens=feed.evicted,
        queue_ms=(started - job.received_at) * 1000,
        total_ms=(done - job.received_at) * 1000,
    )
    finished = Finished(reason, stats, stop_sequence)
    emit(finished)
    return finished
