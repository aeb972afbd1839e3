"""What the engine's one KV cache holds: a session's conversation, slid through a window.

`logical` is every token of the conversation fed so far; the engine's `history` is what is
physically cached (protected prefix + most recent tokens). A new turn of the same session
whose tokens extend `logical` prefills only the new tokens; another session (or none) starts
over. Positions stay below the trained context by re-basing (re-prefill) before the limit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from edgellm.common.logs import get_logger
from edgellm.engine.base import Engine, Logits, last_row
from edgellm.engine.costs import ForwardCosts
from edgellm.engine.kv_window import KvMethod, WindowPolicy, eviction_range, system_prompt_length

log = get_logger(__name__)


@dataclass
class FeedStats:
    """Counters for one request."""

    reused: int = 0  # prompt tokens already in the cache
    prefilled: int = 0  # prompt tokens run through the model
    recomputed: int = 0  # tokens re-run to re-base or re-prefill after eviction
    evicted: int = 0


@dataclass
class KvCache:
    """Drives the engine's cache for generation with a window policy and session reuse."""

    engine: Engine
    policy: WindowPolicy
    turn_start: int | None = None  # e.g. <|im_start|>: message boundaries for eviction
    turn_end: int | None = None
    owner: str = ""  # session whose conversation is cached ("" = anonymous, never reused)
    logical: list[int] = field(default_factory=list)
    n_keep: int = 0
    evicted_total: int = 0
    # Tiers: the cache starts at the smallest budget and moves up only when this says the
    # phone can hold `extra_tokens` more KV; otherwise it slides within the current tier.
    can_grow: Callable[[int], bool] = lambda extra_tokens: True
    tier: int = 0
    costs: ForwardCosts = field(default_factory=ForwardCosts)  # measured forward times, for drafting
    # Leading cached tokens whose KV is what plain decoding computes (prefills and one-token
    # decodes on an exact prefix). A verify's tokens are not: MNN's multi-token forward differs
    # slightly from one-token decodes (docs/engine.md), and so does anything computed over them.
    exact_len: int = 0
    repaired: int = 0  # tokens re-decoded one at a time by repair(), since this cache was made

    # -- request start ------------------------------------------------------------------------------
    def begin(self, session_id: str, ids: Sequence[int], stats: FeedStats, exact: bool = True) -> list[int]:
        """Prepare the cache for prompt `ids`; return the suffix still to be fed.

        `exact`: a reused session cache that a speculative turn left inexact is repaired first
        (False for a turn that takes batched logits as they are, Speculation.FAST).
        """
        engine = self.engine
        if session_id and session_id == self.owner and engine.history:
            common = _common_prefix(self.logical, ids)
            whole_cache_is_logical = len(engine.history) == len(self.logical)
            if common == len(self.logical) < len(ids):
                stats.reused = common
                if exact:
                    self._make_exact()
                return list(ids[common:])
            # At least one prompt token must run to produce logits for the first new token.
            common = min(common, len(ids) - 1)
            if whole_cache_is_logical and common > self.n_keep:
                # Diverged inside an un-slid conversation (e.g. an edited last turn): cut back.
                engine.truncate(common)
                del self.logical[common:]
                stats.reused = common
                self.exact_len = min(self.exact_len, common)
                if exact:
                    self._make_exact()
                return list(ids[common:])
        engine.reset()
        self.exact_len = 0
        self.owner = session_id
        self.logical = []
        self.tier = 0
        self.n_keep = self._protected(ids)
        return list(ids)

    def _protected(self, ids: Sequence[int]) -> int:
        if not self.policy.sliding:
            return 0
        if self.policy.n_keep == -1 and self.turn_start is not None and self.turn_end is not None:
            return system_prompt_length(ids, self.turn_start, self.turn_end) or 4
        return max(self.policy.n_keep, 0)

    # -- feeding ---------------------------------------------------------------------------------------
    def feed(self, ids: Sequence[int], stats: FeedStats) -> Logits:
        """Prefill ids, sliding the window as needed; return the last logits."""
        return last_row(self._feed(ids, stats, score=False))

    def feed_scored(self, ids: Sequence[int], stats: FeedStats) -> Logits:
        """Prefill ids like feed(); return logits for every fed position, [len(ids), vocab]."""
        return self._feed(ids, stats, score=True)

    def _feed(self, ids: Sequence[int], stats: FeedStats, score: bool) -> Logits:
        if not ids:
            raise ValueError("nothing to feed")  # an internal error: begin() always leaves a token
        pos = 0
        rows: list[Logits] = []
        while pos < len(ids):
            room = self._room()
            if room <= 0:
                self._evict(stats)
                continue
            piece = list(ids[pos : pos + room])
            exact = self.exact
            rows.append(self.engine.prefill_all(piece) if score else self.engine.prefill(piece)[None, :])
            self.logical.extend(piece)
            if exact:
                self.exact_len = len(self.engine.history)
            stats.prefilled += len(piece)
            pos += len(piece)
        return np.concatenate(rows) if len(rows) > 1 else rows[0]

    def step(self, token: int, stats: FeedStats) -> Logits:
        """Decode one token, sliding first when the window is full."""
        if self._room() <= 0:
            self._evict(stats)
        exact = self.exact
        logits = self.engine.decode(token)
        self.logical.append(token)
        if exact:
            self.exact_len += 1
        return logits

    @property
    def exact(self) -> bool:
        """Whether every cached token's KV is what plain decoding computes (then so are the next logits)."""
        return self.exact_len == len(self.engine.history)

    def repair(self) -> Logits:
        """Re-decode, one token at a time, the cached tokens after the exact prefix; the next logits.

        Plain decoding's logits for the same tokens (MNN is deterministic run to run): what greedy
        speculation falls back on when batched logits are too close to call (docs/speculation.md).
        """
        engine = self.engine
        tail = list(engine.history[self.exact_len :])
        if not tail:
            raise ValueError("nothing to repair: the cache is exact")
        engine.rewind(len(tail))
        for token in tail:
            logits = engine.decode(token)
        self.exact_len = len(engine.history)
        self.repaired += len(tail)
        return logits

    def _make_exact(self) -> None:
        """Repair a reused session cache that a speculative turn left inexact."""
        if not self.exact:
            self.repair()

    def room_for_draft(self) -> int:
        """Tokens a verify() can append now without sliding the window (it never slides mid-draft)."""
        return self._room()

    def verify(self, ids: Sequence[int]) -> Logits:
        """Feed a fed token plus its draft in one forward; every position's logits (see room_for_draft)."""
        exact = self.exact and self.engine.logit_tolerance == 0.0  # an engine whose batches are exact
        rows = self.engine.verify(ids)
        self.logical.extend(ids)
        if exact:
            self.exact_len = len(self.engine.history)
        return rows

    def rewind(self, count: int) -> None:
        """Forget the last `count` fed tokens (rejected drafts); kept tokens keep their positions."""
        if count:
            self.engine.rewind(count)
            del self.logical[len(self.logical) - count :]
            self.exact_len = min(self.exact_len, len(self.engine.history))

    @property
    def budget(self) -> int:
        """The current tier's size in tokens (the window when there are no tiers)."""
        budgets = self.policy.budgets
        return budgets[min(self.tier, len(budgets) - 1)]

    def _room(self) -> int:
        """Tokens that fit before the budget is full or positions reach the trained context."""
        engine = self.engine
        # Under "erase" positions keep growing past the cached length: re-base before the limit.
        pos_room = engine.context_length - engine.position
        if not self.policy.sliding:
            return pos_room
        room = self.budget - len(engine.history)
        while room <= 0 and self._grow():
            room = self.budget - len(engine.history)
        return min(room, pos_room)

    def _grow(self) -> bool:
        """Move to the next tier if there is one and memory allows; the cache is kept as it is."""
        budgets = self.policy.budgets
        if self.tier + 1 >= len(budgets):
            return False
        nxt = budgets[self.tier + 1]
        if not self.can_grow(nxt - self.budget):
            log.info("kv_tier_held", tier=self.budget, wanted=nxt, reason="memory")
            return False
        log.info("kv_tier_up", tier_from=self.budget, tier_to=nxt)
        self.tier += 1
        return True

    def _evict(self, stats: FeedStats) -> None:
        """Make room: evict a chunk in place, or re-prefill the kept tokens (also re-bases positions)."""
        engine = self.engine
        if not self.policy.sliding:
            raise ContextFull(f"the context of {engine.context_length} tokens is full")
        window_full = len(engine.history) >= self.budget
        if window_full:
            begin, end = eviction_range(engine.history, self.n_keep, self.policy.evict_chunk, self.turn_start)
            evicted = end - begin
            stats.evicted += evicted
            self.evicted_total += evicted
            if self.policy.method == KvMethod.ERASE and engine.position + 1 < engine.context_length:
                engine.erase(begin, end)
                if self.exact_len > begin:
                    self.exact_len = max(begin, self.exact_len - evicted)
                return
            kept = [*engine.history[:begin], *engine.history[end:]]
        else:
            kept = list(engine.history)
        # Re-prefill: compact positions (the "reprefill" method, or a re-base under "erase").
        stats.recomputed += len(kept)
        engine.reset()
        if kept:
            engine.prefill(kept)
        # A re-prefill is one batched forward in every mode: the re-based cache is the reference.
        self.exact_len = len(engine.history)


class ContextFull(Exception):
    """No window to slide and no room left."""


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
