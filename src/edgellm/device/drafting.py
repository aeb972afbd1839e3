"""Free drafts for speculative decoding: prompt lookup over the conversation, and when to use them.

`NgramDrafter` proposes the tokens that followed the latest earlier occurrence of the context's
last n tokens (n = 3, then 2) in the prompt, the session's earlier turns and the reply so far.
`DraftPolicy` picks the draft length that maximises expected tokens per decode step from the
acceptance rate seen so far and the engine's fixed price of each forward length, drafts nothing
when a plain decode step is expected to be faster (the "self-disabling" of speculation), and backs
off after failed drafts unless the reply is copying a long match.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from edgellm.engine.config import DRAFT_LENGTHS
from edgellm.engine.costs import DraftCosts

MAX_NGRAM = 3
MIN_NGRAM = 2  # 1-gram matches propose too often on open text (chosen a priori, not tuned)
# The back-off after a draft of which nothing was accepted (DraftPolicy). Chosen on the tune halves
# only (bench/prompts spec_grounded/spec_open and the issue-31 kinds), by forwards counted and
# priced at W4A8_DRAFT_COSTS (timing-free, the machine was at load 12): against no back-off, open
# questions median 1.012 -> 1.027x plain, worst 0.985 -> 0.999x; copy/edit/quotes/summary/code
# within 0.03 of it. LONG_MATCH 6 instead of 3 cost code 2.15 -> 2.03x, so only proposals from a
# 2-gram match (on open text, mostly coincidence) wait.
BACKOFF_FIRST = 2
BACKOFF_MAX = 32
LONG_MATCH = 3  # a proposal after a match this long (the longest the index holds) is verified anyway


class NgramDrafter:
    """Prompt-lookup drafting over every token seen so far (an index of n-grams, O(1) per token)."""

    def __init__(self, tokens: Iterable[int] = (), max_n: int = MAX_NGRAM, min_n: int = MIN_NGRAM) -> None:
        self.max_n, self.min_n = max_n, min_n
        self.tokens: list[int] = []
        # n-gram -> index of the token that followed its latest occurrence
        self._next: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        """Append tokens; each n-gram ending just before a new token now points at it."""
        seq = self.tokens
        for token in tokens:
            end = len(seq)
            for n in range(self.min_n, self.max_n + 1):
                if end >= n:
                    self._next[tuple(seq[end - n : end])] = end
            seq.append(token)

    def draft(self, limit: int) -> tuple[list[int], int]:
        """Up to `limit` tokens that followed the longest matching suffix, and its length (0: none)."""
        seq = self.tokens
        for n in range(min(self.max_n, len(seq)), self.min_n - 1, -1):
            start = self._next.get(tuple(seq[len(seq) - n :]))
            if start is not None:
                return seq[start : start + limit], n
        return [], 0


@dataclass
class DraftPolicy:
    """Adaptive draft length for one request, from acceptance so far and fixed forward prices.

    A verified draft of which nothing was accepted starts a back-off: the next BACKOFF_FIRST, then
    twice as many (up to BACKOFF_MAX) steps are plain, unless the proposal follows a match of
    LONG_MATCH tokens or more (the reply is copying); a draft with an accepted token ends it.
    """

    costs: DraftCosts
    draft_max: int
    acceptance: float = 0.5  # estimated chance the next drafted token is accepted (prior)
    smoothing: float = 0.25
    drafted: int = 0
    accepted: int = 0
    lengths: tuple[int, ...] = field(init=False)
    # Greedy on an engine whose batches are inexact: draft only after this many tokens in a row
    # were chosen with a lead above the engine's tolerance (0 = no such rule; see repaired()).
    confident_needed: int = 0
    confident_run: int = 0
    backoff: int = 0  # the length of the current back-off (0: none)
    waiting: int = 0  # plain steps left in it

    def __post_init__(self) -> None:
        self.lengths = tuple(k for k in DRAFT_LENGTHS if k <= self.draft_max)

    def choose(self, available: int, match: int = 0) -> int:
        """Draft length to verify now, given `available` draft tokens that follow a match of `match`
        tokens (0 = take a plain step)."""
        if not self.lengths or self.confident_run < self.confident_needed:
            return 0
        if self.waiting > 0:
            self.waiting -= 1
            if match < LONG_MATCH:
                return 0
        best, best_rate = 0, 1.0  # a plain step: one token per decode step
        a = min(self.acceptance, 0.999)
        for k in self.lengths:
            if k > available:
                break
            expected = (1.0 - a ** (k + 1)) / (1.0 - a)  # accepted drafts + the token the verify adds
            rate = expected / self.costs.estimate(k + 1)
            if rate > best_rate:
                best, best_rate = k, rate
        return best

    def decided(self, sure: bool) -> None:
        """Record whether a greedy choice led by more than the engine's tolerance."""
        self.confident_run = self.confident_run + 1 if sure else 0

    def repaired(self, tokens: int) -> None:
        """`tokens` verified tokens had to be re-decoded one at a time (greedy, a choice too close to
        call on batched logits): wait for another confident run before drafting again.

        Why: a repair re-decodes every token since the cache was last exact, so it takes back what
        the drafts saved and more; on MNN's W4A8 kernels a choice within the tolerance comes every
        few tokens on average (docs/speculation.md), but not inside long confident stretches
        (copying a passage), which is where greedy drafts can pay.
        """
        if tokens > 0:
            self.confident_run = 0

    def observe(self, drafted: int, accepted: int, verified: bool = True) -> None:
        """Record how many of `drafted` tokens were accepted (verified, or checked against plain steps)."""
        if drafted <= 0:
            return
        if verified:
            self.drafted += drafted
            self.accepted += accepted
            self.backoff = 0 if accepted else min(max(BACKOFF_FIRST, 2 * self.backoff), BACKOFF_MAX)
            self.waiting = self.backoff
        # Per-token acceptance: accepted successes, one failure unless everything was accepted.
        trials = accepted + (0 if accepted == drafted else 1)
        rate = accepted / trials if trials else self.acceptance
        self.acceptance += self.smoothing * (rate - self.acceptance)
