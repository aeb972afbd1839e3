"""The token loop of one generation: plain decode steps, or drafts verified in one forward.

Each turn of the loop emits one token and then advances: either a plain decode step, or (with
speculation) the token plus a prompt-lookup draft of k tokens in one multi-token forward. The
sampler accepts the longest draft prefix it agrees with (`Sampler.verify`: exact for greedy, the
speculative-sampling rule otherwise), and the rejected tokens are rewound out of the KV cache.
Where the draft stops being accepted the loop is back to what a plain step would give, so the
emitted text is what plain decoding emits (greedy) or distributed as it (sampled).

With a TokenGuide (a constrained request), every token is sampled from grammar-masked logits
and the loop never drafts: a draft is verified against the model only, not the grammar.
With `scores` (a request for logprobs) every token is scored from the logits it was sampled
from, and the loop never drafts either: verify rows are not plain decoding's logits (MNN W4A8).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from edgellm.common.errors import InvalidArgument
from edgellm.device.constrain import TokenGuide
from edgellm.device.drafting import DraftPolicy, NgramDrafter
from edgellm.device.logprobs import TokenScore
from edgellm.device.sampler import Sampler
from edgellm.engine.base import Engine, Logits
from edgellm.engine.config import verify_lengths
from edgellm.engine.costs import ForwardCosts
from edgellm.engine.kv_cache import ContextFull, FeedStats, KvCache

# Greedy on an engine with inexact batches drafts only after this many confident choices in a row
# (a priori, not tuned: about the length of a sentence of copied text).
CONFIDENT_RUN = 16


class FinishReason(StrEnum):
    """Why a generation ended."""

    STOP = "stop"  # an end-of-turn token or a stop string
    LENGTH = "length"  # max_new_tokens reached
    CANCELLED = "cancelled"  # Cancel, a client cancel or a deadline
    CONTEXT = "context"  # no room left in the context (no sliding window)


class Speculation(StrEnum):
    """Per-request speculative decoding."""

    AUTO = "auto"  # draft where the policy expects it to pay; greedy output token-identical to OFF
    OFF = "off"
    # Draft where it pays and take greedy choices on the verify's own batched logits: on an engine
    # whose multi-token forward differs from its one-token decode (MNN W4A8, docs/engine.md) a
    # near-tie can resolve the other way, so greedy output may differ from OFF's; sampled output
    # keeps its distribution as with AUTO.
    FAST = "fast"


@dataclass
class LoopResult:
    """What the loop did."""

    generated: int = 0
    reason: FinishReason = FinishReason.LENGTH
    first_token_at: float = 0.0
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0
    repaired_tokens: int = 0  # re-decoded one at a time where batched logits were too close to call


class TokenLoop:
    """Emit up to `max_new` tokens starting from the prompt's last logits."""

    def __init__(
        self,
        cache: KvCache,
        sampler: Sampler,
        push: Callable[[int], bool],
        max_new: int,
        feed: FeedStats,
        policy: DraftPolicy | None = None,
        drafter: NgramDrafter | None = None,
        guide: TokenGuide | None = None,
        exact: bool = True,
        scores: Callable[[TokenScore], None] | None = None,
        top_n: int = 0,
    ) -> None:
        drafting = policy is not None or drafter is not None
        if guide is not None and drafting:
            # A draft token is accepted against the model's logits, never the grammar's mask, so
            # it could leave the constraint: constrained requests decode plainly.
            raise ValueError("a constrained generation cannot draft")
        if scores is not None and drafting:
            # Verified rows differ from plain decoding's logits (up to ~1.7 on W4A8), and a
            # logprob must be the one of the logits the token was actually chosen from.
            raise ValueError("a generation with logprobs cannot draft")
        self.scores, self.top_n = scores, top_n
        self._score: TokenScore | None = None  # the last sampled token's, reported when emitted
        self.cache, self.sampler, self.push, self.max_new, self.feed = cache, sampler, push, max_new, feed
        self.policy, self.drafter, self.guide = policy, drafter, guide
        self.stop_ids = cache.engine.stop_ids
        # None: choices are taken on whatever logits the engine gave (Speculation.FAST), with no
        # check against plain decoding's; otherwise the lead a greedy choice on inexact logits needs.
        self.tolerance: float | None = cache.engine.logit_tolerance if exact else None
        self.result = LoopResult()
        self._shadow: list[int] = []  # a draft not verified, checked against the plain tokens instead
        self._shadow_at = 0

    def run(
        self, logits: Logits, cancelled: threading.Event, between_tokens: Callable[[], None] | None
    ) -> LoopResult:
        """Run to a stop, the length limit, a full context or a cancel."""
        result = self.result
        if cancelled.is_set():
            result.reason = FinishReason.CANCELLED
            return result
        token = self._sample(logits)
        result.first_token_at = time.perf_counter()
        while True:
            reason = self._emit(token)
            if reason is None and cancelled.is_set():
                reason = FinishReason.CANCELLED
            if reason is not None:
                result.reason = reason
                return result
            if between_tokens is not None:
                between_tokens()
            try:
                token, reason = self._advance(token)
            except ContextFull:
                reason = FinishReason.CONTEXT
            if reason is not None:
                result.reason = reason
                return result

    # -- one token out -------------------------------------------------------------------------
    def _emit(self, token: int) -> FinishReason | None:
        """Emit a chosen token; why the generation ends here, if it does."""
        if token in self.stop_ids:
            return FinishReason.STOP
        self.result.generated += 1
        if self.scores is not None and self._score is not None:
            self.scores(self._score)
        self.sampler.observe(token)
        if self.guide is not None:
            self.guide.advance(token)
        if self.drafter is not None:
            self.drafter.extend((token,))
            self._check_shadow(token)
        if self.push(token) or (self.guide is not None and self.guide.complete):
            return FinishReason.STOP
        if self.result.generated >= self.max_new:
            return FinishReason.LENGTH
        return None

    def _sample(self, logits: Logits) -> int:
        """Sample the next token, within the constraint when there is one."""
        if self.guide is not None:
            logits = self.guide.mask(logits)
        if self.scores is not None:
            token, self._score = self.sampler.choose(logits, self.top_n)
        else:
            token = self.sampler.sample(logits)
        if self.guide is None:
            return token
        if not self.guide.allows(token):
            # Only possible when logit_bias (-inf) removes every token the grammar allows.
            raise InvalidArgument("logit_bias forbids every token the constraint allows at this point")
        return token

    # -- one step in -----------------------------------------------------------------------------
    def _advance(self, token: int) -> tuple[int, FinishReason | None]:
        """Feed `token` (with a draft when it pays); the next token to emit, or why to end."""
        draft = self._draft()
        if not draft:
            return self._next(self.cache.step(token, self.feed)), None
        k = len(draft)
        rows = self.cache.verify([token, *draft])
        self.result.draft_tokens += k
        for i, proposed in enumerate(draft):
            if self.tolerance is None:
                chosen: int | None = self.sampler.verify(rows[i], proposed)
            else:
                chosen = self.sampler.verify_within(rows[i], proposed, self.tolerance)
            if chosen is not None and self.policy is not None:
                self.policy.decided(True)
            if chosen is None:
                # Too close to call on batched logits: the drafts from here on are dropped and
                # the token comes from plain decoding's own logits (the verify's own row when the
                # engine's batches are exact: nothing to re-decode then).
                self._settle(k, i)
                return self._sample(rows[i] if self.cache.exact else self._repair()), None
            if chosen != proposed:
                self._settle(k, i)
                return chosen, None
            self.result.accepted_draft_tokens += 1
            reason = self._emit(proposed)
            if reason is not None:
                # Plain decoding would not have fed `proposed` or anything after it yet.
                self._settle(k, i + 1, rewind=k - i)
                return -1, reason
        self._settle(k, k)
        return self._next(rows[k]), None

    def _next(self, logits: Logits) -> int:
        """The token after `logits`; plain decoding's choice even when the cache holds verified tokens.

        Greedy identity: logits computed in a verify, or decoded over a cache that holds verified
        tokens, may sit up to the engine's `logit_tolerance` from what plain decoding computes. Their
        argmax is plain decoding's when it leads by more than that; otherwise the inexact tail of
        the cache is re-decoded one token at a time (`KvCache.repair`) and the choice is made on
        the reference logits (docs/speculation.md, "Greedy identity").
        """
        if self.guide is not None or self.tolerance is None:  # never verifies, or FAST
            return self._sample(logits)
        watch = self.policy is not None and self.policy.confident_needed > 0
        if self.cache.exact and not watch:
            return self._sample(logits)
        chosen = self.sampler.decide(logits, self.tolerance)
        if watch:
            assert self.policy is not None
            self.policy.decided(chosen is not None)
        if chosen is not None:
            return chosen
        return self._sample(logits if self.cache.exact else self._repair())

    def _repair(self) -> Logits:
        before = self.cache.repaired
        logits = self.cache.repair()
        repaired = self.cache.repaired - before
        self.result.repaired_tokens += repaired
        if self.policy is not None:
            self.policy.repaired(repaired)
        return logits

    def _settle(self, drafted: int, accepted: int, rewind: int | None = None) -> None:
        """Rewind the drafts after the accepted prefix and tell the policy how the draft did."""
        self.cache.rewind(drafted - accepted if rewind is None else rewind)
        if self.policy is not None:
            self.policy.observe(drafted, accepted)

    def _draft(self) -> list[int]:
        """The draft to verify with the next fed token ([] = a plain step)."""
        if self.policy is None or self.drafter is None:
            return []
        room = min(self.max_new - self.result.generated, self.cache.room_for_draft() - 1)
        if room <= 0:
            return []
        proposal, match = self.drafter.draft(self.policy.draft_max)
        k = self.policy.choose(min(room, len(proposal)), match)
        if k == 0 and proposal and not self._shadow:
            self._shadow, self._shadow_at = proposal, 0
        return proposal[:k]

    def _check_shadow(self, token: int) -> None:
        """Score an unverified draft against the token plain decoding produced (costs nothing)."""
        shadow = self._shadow
        if not shadow or self.policy is None:
            return
        if token == shadow[self._shadow_at]:
            self._shadow_at += 1
            if self._shadow_at < len(shadow):
                return
            self.policy.observe(len(shadow), len(shadow), verified=False)
        else:
            self.policy.observe(self._shadow_at + 1, self._shadow_at, verified=False)
        self._shadow = []


CALIBRATION_TEXT = "The history of the city begins with a small harbour on the river, where traders met. " * 4


def measure_forward_costs(engine: Engine, costs: ForwardCosts, prompt: list[int], repeats: int = 5) -> None:
    """Time a decode step and each verify length the loop uses, after a prefill of `prompt`; then reset.

    Run at load (after the warm-up): the rate watch's promised decode step, and the verify costs
    bench/bench_spec.py reports. The draft policy never reads them (`Engine.draft_costs`).
    """
    if engine.draft_max <= 0 or not prompt:
        return
    logits = engine.prefill(prompt)
    token = int(logits.argmax())
    for _ in range(repeats):
        for length in [1, *verify_lengths(engine.draft_max)]:
            start = time.perf_counter()
            if length == 1:
                engine.decode(token)
                costs.record(1, time.perf_counter() - start)
                engine.rewind(1)  # a plain step never rewinds: not timed
                continue
            engine.verify([token] * length)
            engine.rewind(length - 1)  # what a fully rejected draft costs: verify + rewind
            costs.record(length, time.perf_counter() - start)
            engine.rewind(1)
    engine.reset()
