"""One generation, run on the worker thread: template, prefill, sample, stream, stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from edgellm.common.errors import InvalidArgument
from edgellm.device.constrain import Constraint, TokenGuide
from edgellm.device.decoding import CONFIDENT_RUN, FinishReason, LoopResult, Speculation, TokenLoop
from edgellm.device.drafting import DraftPolicy, NgramDrafter
from edgellm.device.logprobs import Logprob, TokenScore, labelled, score_prompt
from edgellm.device.sampler import Sampler, SamplingConfig
from edgellm.device.text import StopMatcher, Utf8Stream
from edgellm.engine.base import Engine, Logits, last_row
from edgellm.engine.kv_cache import FeedStats, KvCache

PROMPT_PIECE = 256  # prompt logprobs per response message


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
    constraint: Constraint | None = None  # the output must match it (docs/constrained.md)
    speculation: Speculation = Speculation.AUTO  # drafts only where it pays (docs/speculation.md)
    logprobs: bool = False  # score every generated token (logprobs.py); decodes without drafts
    top_logprobs: int = 0  # alternatives per scored position
    prompt_logprobs: bool = False  # score the prompt teacher-forced, from one all-positions prefill
    prompt_token_ids: tuple[int, ...] = ()  # the prompt as token ids (then prompt/messages are empty)


@dataclass(frozen=True)
class Delta:
    """Newly complete text and the token ids that produced it."""

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[Logprob, ...] = ()  # one per token id, when the request asked
    prompt_logprobs: tuple[Logprob, ...] = ()  # the prompt's, in the first event only


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
    constraint_ms: float = 0.0  # token masks: computed and applied
    draft_tokens: int = 0  # speculative tokens verified
    accepted_draft_tokens: int = 0  # of which the sampler accepted
    repaired_tokens: int = 0  # re-decoded one at a time where batched logits were too close to call


@dataclass(frozen=True)
class Finished:
    """The last event of a request."""

    reason: FinishReason
    stats: Stats
    stop_sequence: str = ""


Event = Delta | Finished
Emit = Callable[[Event], None]


def render_prompt(engine: Engine, job: GenerationJob, sliding: bool = False) -> list[int]:
    """Token ids for the request: chat template on the device, or raw text.

    Checked here, on the worker thread, rather than in the RPC layer: only the engine knows the
    tokenizer and the context length. A prompt as long as the context is refused unless the
    request slides a window (the cache then keeps the protected start and the most recent tokens
    while the prompt is fed).
    """
    ids = list(job.prompt_token_ids) or engine.encode(
        engine.apply_chat_template(job.messages) if job.messages else (job.prompt or "")
    )
    bad = next((t for t in job.prompt_token_ids if t >= engine.vocab_size), None)
    if bad is not None:
        raise InvalidArgument(
            f"prompt_token_ids holds {bad}, outside the vocabulary [0, {engine.vocab_size})"
        )
    if not ids:
        raise InvalidArgument("the prompt is empty after tokenization")
    if len(ids) >= engine.context_length and not sliding:
        raise InvalidArgument(
            f"prompt is {len(ids)} tokens; the model's context is {engine.context_length}: shorten it "
            "(leave room for at least one new token), or slide a KV window over it (request kv_window, "
            "`--kv-window N`: only the start and the last N tokens stay in view)"
        )
    return ids


class _TextOut:
    """The text side of one generation: UTF-8 assembly, stop strings, and the Delta events."""

    def __init__(self, engine: Engine, stop: Sequence[str], emit: Emit) -> None:
        self._token_bytes = engine.token_bytes
        self._utf8 = Utf8Stream()
        self._stops = StopMatcher(list(stop))
        self._emit = emit
        self._pending: list[int] = []  # tokens whose text is not complete or held by a stop prefix
        self._scores: list[Logprob] = []  # the pending tokens' logprobs, when the request asked
        self.stop_sequence = ""

    def score(self, score: TokenScore) -> None:
        """The logprob of the token about to be pushed."""
        self._scores.append(labelled(score, self._token_bytes))

    def push(self, token: int) -> bool:
        """Add one generated token and emit whatever text is complete; True when a stop string matched."""
        self._pending.append(token)
        result = self._stops.push(self._utf8.push(self._token_bytes(token)))
        if result.text or result.stop is not None or not self._stops.stops:
            self._send(result.text)
        if result.stop is not None:
            self.stop_sequence = result.stop
            return True
        return False

    def close(self, reason: FinishReason) -> None:
        """Emit the held tail (nothing after a stop string; only the token ids when cancelled)."""
        if self.stop_sequence:
            return
        tail = ""
        if reason != FinishReason.CANCELLED:
            tail = self._stops.push(self._utf8.flush()).text + self._stops.flush()
        if tail or self._pending:
            self._send(tail)

    def prompt(self, ids: list[int], rows: Logits, top_n: int) -> None:
        """Emit the prompt's logprobs (rows: the prefill's logits at every position)."""
        scores = [labelled(s, self._token_bytes) for s in score_prompt(rows, ids, top_n)]
        # Why in pieces: one message would grow with the prompt (8,192 tokens x 21 entries, ~3 MB
        # built and parsed at once on each side); 256 per message stay under ~100 KB.
        for at in range(0, len(scores), PROMPT_PIECE):
            self._emit(Delta("", (), prompt_logprobs=tuple(scores[at : at + PROMPT_PIECE])))

    def _send(self, text: str) -> None:
        self._emit(Delta(text, tuple(self._pending), tuple(self._scores)))
        self._pending, self._scores = [], []


def run_generation(
    cache: KvCache,
    job: GenerationJob,
    emit: Emit,
    cancelled: threading.Event,
    between_tokens: Callable[[], None] | None = None,
    guide: TokenGuide | None = None,
) -> Finished:
    """Generate for job, emitting Delta events and finally one Finished event (also returned).

    With a guide (the job's constraint, compiled), every step samples only what the grammar
    allows, and the generation stops as soon as the grammar is complete.
    """
    received, started = job.received_at, time.perf_counter()
    engine = cache.engine
    ids = render_prompt(engine, job, cache.policy.sliding)
    job.sampling.validate(engine.vocab_size)  # needs the vocabulary, so here rather than in the RPC
    sampler = Sampler(job.sampling)
    sampler.observe_prompt(ids)
    out = _TextOut(engine, job.stop, emit)
    # Without a sliding window the context bounds the reply; with one, only max_new_tokens does.
    max_new = job.max_new_tokens
    if not cache.policy.sliding:
        max_new = min(max_new, engine.context_length - len(ids))

    feed = FeedStats()
    prefill_at = time.perf_counter()
    exact = job.speculation != Speculation.FAST  # greedy output token-identical to plain decoding's
    logits = _prefill(cache, job, ids, feed, out, exact)
    policy, drafter = _drafting(cache, job, ids, guide, exact)
    scores = out.score if job.logprobs else None
    loop = TokenLoop(
        cache, sampler, out.push, max_new, feed, policy, drafter, guide,
        exact=exact, scores=scores, top_n=job.top_logprobs,
    )  # fmt: skip
    # max_new_tokens 0 (prompt_logprobs only): scoring, no generation.
    result = loop.run(logits, cancelled, between_tokens) if job.max_new_tokens else LoopResult()
    out.close(result.reason)
    reason = result.reason
    if reason == FinishReason.LENGTH and result.generated < job.max_new_tokens:
        reason = FinishReason.CONTEXT
    timing = (received, started, prefill_at)
    stats = _stats(timing, len(ids), result, feed, guide.mask_ms if guide else 0.0)
    finished = Finished(reason, stats, out.stop_sequence)
    emit(finished)
    return finished


def _prefill(
    cache: KvCache, job: GenerationJob, ids: list[int], feed: FeedStats, out: _TextOut, exact: bool
) -> Logits:
    """Feed the prompt; the logits for the first new token. With prompt_logprobs, the whole prompt
    runs again in one prefill that computes every position (no session reuse: a reused prefix
    has no logits) and its logprobs are emitted first."""
    if not job.prompt_logprobs:
        return cache.feed(cache.begin(job.session_id, ids, feed, exact), feed)
    rows = cache.feed_scored(cache.begin("", ids, feed, exact), feed)
    out.prompt(ids, rows, job.top_logprobs)
    return last_row(rows)


def _drafting(
    cache: KvCache, job: GenerationJob, ids: list[int], guide: TokenGuide | None, exact: bool
) -> tuple[DraftPolicy | None, NgramDrafter | None]:
    """The draft policy and drafter, or none: speculation off, an engine that cannot verify, or a
    constrained or logprobs request.

    A constrained request never drafts: a prompt-lookup draft is verified against the model's
    logits only, not the grammar, so an accepted draft token could leave the constraint. Masking
    every verified row would fix that, but costs a mask per draft token for little gain on
    short structured replies (docs/constrained.md). A logprobs request never drafts: its numbers
    must be plain decoding's logits, which verify rows are not on W4A8 (docs/gateway.md).
    """
    engine = cache.engine
    if job.speculation == Speculation.OFF or engine.draft_max <= 0 or guide is not None or job.logprobs:
        return None, None
    # Drafts come from the whole conversation the prompt carries (earlier turns included).
    # Exact greedy over inexact batches (MNN W4A8): draft only inside confident stretches,
    # where a repair (docs/speculation.md, "Greedy identity") is unlikely to take the gain back.
    confident = CONFIDENT_RUN if exact and job.sampling.greedy and engine.logit_tolerance > 0 else 0
    return DraftPolicy(engine.draft_costs, engine.draft_max, confident_needed=confident), NgramDrafter(ids)


def _stats(
    timing: tuple[float, float, float],
    prompt_tokens: int,
    result: LoopResult,
    feed: FeedStats,
    mask_ms: float,
) -> Stats:
    received, started, prefill_at = timing
    done = time.perf_counter()
    first = result.first_token_at or done
    generated = result.generated
    prefill_done = feed.prefilled + feed.recomputed
    prefill_s = max(first - prefill_at, 1e-9)
    decode_s = done - first
    return Stats(
        prompt_tokens=prompt_tokens,
        completion_tokens=generated,
        ttft_ms=(first - received) * 1000,
        prefill_tokens_per_second=prefill_done / prefill_s if prefill_done else 0.0,
        decode_tokens_per_second=(generated - 1) / decode_s if generated > 1 and decode_s > 0 else 0.0,
        prefilled_tokens=feed.prefilled,
        evicted_tokens=feed.evicted,
        queue_ms=(started - received) * 1000,
        total_ms=(done - received) * 1000,
        constraint_ms=mask_ms,
        draft_tokens=result.draft_tokens,
        accepted_draft_tokens=result.accepted_draft_tokens,
        repaired_tokens=result.repaired_tokens,
    )
