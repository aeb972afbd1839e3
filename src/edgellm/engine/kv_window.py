"""Sliding-window KV policy: what to evict, never splitting a chat-template header.

Pure functions over token lists; the engine applies the result. The protected prefix
(`n_keep`, attention sinks or the system prompt) is never evicted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from edgellm.common.errors import InvalidArgument


class KvMethod(StrEnum):
    """How the window slides: erase in place (positions kept) or re-prefill the kept tokens."""

    ERASE = "erase"
    REPREFILL = "reprefill"


METHODS = tuple(m.value for m in KvMethod)
MIN_WINDOW = 64  # the smallest sliding window: room for n_keep and an eviction chunk


@dataclass(frozen=True)
class WindowPolicy:
    """How the KV cache slides once it is full.

    window: most tokens held in the KV cache (0 = no sliding: stop at the context limit).
    n_keep: protected tokens at the front (attention sinks / system prompt); -1 = the system prompt.
    chunk: tokens evicted at once (0 = a quarter of the window), so eviction stays rare.
    method: "erase" removes the chunk in place and keeps absolute positions; "reprefill"
        rebuilds the cache from the kept tokens (compact positions, costs a prefill).
    """

    window: int = 0
    n_keep: int = 4
    chunk: int = 0
    method: KvMethod = KvMethod.ERASE
    tiers: tuple[int, ...] = ()  # KV budgets below the window, smallest first (e.g. 512, 2048)

    @property
    def budgets(self) -> tuple[int, ...]:
        """The cache sizes a conversation moves through: the tiers, then the window itself."""
        return (*(t for t in self.tiers if t < self.window), self.window) if self.sliding else ()

    @property
    def sliding(self) -> bool:
        """Whether eviction is enabled."""
        return self.window > 0

    @property
    def evict_chunk(self) -> int:
        """Tokens to evict at once."""
        return self.chunk or max(1, self.window // 4)

    def validate(self, context_length: int) -> None:
        """Raise InvalidArgument for a window/n_keep that cannot work with this model."""
        if self.method not in METHODS:
            raise InvalidArgument(f"kv method must be one of {METHODS}, got {self.method!r}")
        if self.window < 0 or self.window > context_length:
            raise InvalidArgument(f"kv_window must be between 0 and the context length {context_length}")
        if self.n_keep < -1:
            raise InvalidArgument(f"n_keep must be >= 0 (or -1 for the system prompt), got {self.n_keep}")
        if self.window:
            self._validate_window()
        self._validate_tiers()

    def _validate_window(self) -> None:
        """A sliding window must be large enough to keep n_keep and still evict a chunk."""
        if self.window < MIN_WINDOW:
            raise InvalidArgument(f"kv_window {self.window} is too small (minimum {MIN_WINDOW})")
        if self.n_keep >= self.window // 2:
            raise InvalidArgument(
                f"n_keep {self.n_keep} must be below half the window ({self.window // 2}) "
                "to leave room to slide"
            )
        if self.evict_chunk > self.window - max(self.n_keep, 0) - 1:
            raise InvalidArgument(f"eviction chunk {self.evict_chunk} does not fit in the window")

    def _validate_tiers(self) -> None:
        """Tiers are increasing sizes of at least 64 tokens, under a sliding window."""
        if not self.tiers:
            return
        if list(self.tiers) != sorted(set(self.tiers)) or self.tiers[0] < 64:
            raise InvalidArgument(
                f"kv tiers must be increasing sizes of at least 64 tokens, got {self.tiers}"
            )
        if not self.sliding:
            raise InvalidArgument("kv tiers need a sliding window (--kv-window) as the top tier")


def system_prompt_length(tokens: Sequence[int], turn_start: int, turn_end: int) -> int:
    """Tokens up to and including the first message's end marker, if it is a system message."""
    if not tokens or tokens[0] != turn_start:
        return 0
    try:
        end = list(tokens).index(turn_end)
    except ValueError:
        return 0
    # Up to and including the end marker; the newline the template writes after it is not protected.
    return end + 1


def eviction_range(
    tokens: Sequence[int], n_keep: int, chunk: int, turn_start: int | None = None
) -> tuple[int, int]:
    """Half-open range [begin, end) to evict: `chunk` tokens after the protected prefix.

    The end moves forward to the next message start (`turn_start`, e.g. <|im_start|>) when one lies
    within another chunk, so a kept message never loses its role header; otherwise it stays put
    but never lands inside a header.
    """
    begin = n_keep
    end = min(len(tokens), begin + chunk)
    if turn_start is None or end >= len(tokens):
        return begin, end
    limit = min(len(tokens), end + chunk)
    for i in range(end, limit):
        if tokens[i] == turn_start:
            return begin, i
    # No message boundary near: don't start the kept part inside a header (<|im_start|> role \n).
    for back in range(1, 4):
        if end - back > begin and tokens[end - back] == turn_start:
            return begin, end - back
    return begin, end
