"""What the daemon needs from an engine: the seam between the daemon and MNN (or a test fake).

The daemon drives one engine from one worker thread. An engine owns one KV cache and reports
what is in it (`history`, `position`); `KvCache` decides what to keep, the engine only obeys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from edgellm.engine.costs import DraftCosts

Logits = npt.NDArray[np.float32]


def last_row(rows: Logits) -> Logits:
    """The last position's logits from a [rows, vocab] array."""
    row: Logits = rows[-1]
    return row


class Engine(Protocol):
    """One loaded model with one KV cache. Not thread-safe: the worker thread alone calls it."""

    @property
    def context_length(self) -> int:
        """Trained context: positions must stay below it."""

    @property
    def stop_ids(self) -> frozenset[int]:
        """Token ids that end a generation."""

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""

    @property
    def history(self) -> Sequence[int]:
        """Token ids physically in the KV cache, in cache order."""

    @property
    def position(self) -> int:
        """The RoPE position the next token gets (can exceed len(history) after an erase)."""

    @property
    def load_ms(self) -> float:
        """How long load() took."""

    @property
    def warmup_ms(self) -> float:
        """How long warm_up() took (0 without one)."""

    # -- lifecycle
    def load(self) -> None:
        """Load the weights with the settings given at construction."""

    def warm_up(self, tokens: int) -> float:
        """Run and forget a dummy prefill of `tokens` tokens plus a few decode steps; return ms."""

    def close(self) -> None:
        """Free the runtime."""

    # -- text
    def encode(self, text: str) -> list[int]:
        """Tokenize raw text (no template)."""

    def apply_chat_template(self, messages: Sequence[tuple[str, str]]) -> str:
        """Render (role, content) messages, ending with the assistant prompt."""

    def token_bytes(self, token: int) -> bytes:
        """Raw bytes of one token (may be part of a UTF-8 character)."""

    def special_id(self, text: str) -> int | None:
        """Id of the token whose bytes are exactly `text` (e.g. '<|im_start|>'), if any."""

    # -- compute
    def prefill(self, ids: Sequence[int]) -> Logits:
        """Append ids to the cache in one batch; the last position's logits, [vocab]."""

    def prefill_all(self, ids: Sequence[int]) -> Logits:
        """Like prefill, with every position's logits, [len(ids), vocab]."""

    def decode(self, token: int) -> Logits:
        """Append one token; the next-token logits, [vocab]."""

    def verify(self, ids: Sequence[int]) -> Logits:
        """Append 2..draft_max+1 tokens after a prefill in one forward; all rows, [len(ids), vocab]."""

    @property
    def draft_max(self) -> int:
        """The longest draft verify() accepts after the fed token (0: the engine cannot verify)."""

    @property
    def draft_costs(self) -> DraftCosts:
        """Fixed prices of each forward length in decode steps, for the draft policy (never timed)."""

    @property
    def logit_tolerance(self) -> float:
        """Bound on max(d) - min(d), d = logits from verify() (or decoded over its tokens) minus what
        one-token decodes give for the same position; 0 when multi-token forwards are exact."""

    # -- cache edits
    def reset(self) -> None:
        """Empty the cache; positions restart at 0."""

    def truncate(self, keep: int) -> None:
        """Keep the first `keep` cached tokens; the next position is `keep`."""

    def erase(self, begin: int, end: int) -> None:
        """Drop cached tokens [begin, end) and keep every kept token's position (and `position`)."""

    def rewind(self, count: int) -> None:
        """Drop the last `count` cached tokens; `position` goes back by `count`, earlier ones stay."""
