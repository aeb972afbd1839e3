"""A fake engine: scripted logits over the fake artifact's tiny vocabulary; deterministic, no model.

It stands in for `MnnEngine` behind the daemon's `Engine` protocol so the daemon's own logic (RPC
layer, worker, queue, cancellation, validation, sessions, the sliding window) is tested in
milliseconds. Its cache bookkeeping follows MNN's as `MnnEngine` drives it: `erase` keeps
positions, `truncate` and `reset` re-base them, and a forward past the context fails.

What it "says" is scripted: after any prefill the logits point at the first token of `reply`,
after the k-th decode at its (k+1)-th, then at <|im_end|> (or round again when `endless`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from edgellm.common.errors import Unavailable
from edgellm.common.token_table import TokenTable
from edgellm.engine.artifact import Artifact
from edgellm.engine.base import Logits
from edgellm.engine.config import EngineConfig
from edgellm.engine.costs import PRIOR_DRAFT_COSTS, DraftCosts
from tests.fakes.fake_artifact import IM_END

DEFAULT_REPLY = " The capital of France is Paris."
PEAK = 4.0  # the scripted token's logit; every other token's is 0 (so sampling varies with the seed)
TIE_SKEW = 0.5  # at a scripted near-tie, how far batched KV moves the runner-up (it then wins)


class FakeEngine:
    """Implements `edgellm.engine.base.Engine` without a model (a test fake)."""

    def __init__(
        self,
        artifact: Artifact,
        config: EngineConfig,
        reply: str = DEFAULT_REPLY,
        endless: bool = False,
        step_s: float = 0.0,
        near_ties: frozenset[int] = frozenset(),
    ) -> None:
        self.artifact = artifact
        self.config = config
        self.tokens = TokenTable(artifact.token_table)
        self.stop_ids = artifact.stop_token_ids
        self.context_length = artifact.context_length
        self._ids = {self.tokens.bytes_of(i): i for i in range(len(self.tokens))}
        self._longest = max(len(p) for p in self._ids)
        self.reply = self.encode(reply)
        self.endless = endless
        self.step_s = step_s  # simulated compute per forward (releases the GIL, like MNN)
        self.history: list[int] = []
        self.position = 0
        self.loaded = False
        self.load_ms = 0.0
        self.warmup_ms = 0.0
        self.forwards = 0
        self._decoded = 0  # decode steps since the last prefill: where the script is
        # Reply positions where the runner-up sits just under the scripted token; in a verify's rows,
        # or once a verified token is cached, it moves above it (MNN's batched-vs-single gap, emulated).
        self.near_ties = near_ties
        self._verified_at: int | None = None  # history length where the earliest cached verify began

    @classmethod
    def factory(
        cls, reply: str = DEFAULT_REPLY, endless: bool = False, step_s: float = 0.0
    ) -> Callable[[Artifact, EngineConfig], FakeEngine]:
        """An engine_factory for DaemonCore/start_server with this script."""
        return lambda artifact, config: cls(artifact, config, reply, endless, step_s)

    # -- lifecycle
    def load(self) -> None:
        """Nothing to load; records a load time so status has one."""
        self.loaded = True
        self.load_ms = 0.1

    def warm_up(self, tokens: int) -> float:
        """A prefill of `tokens` ids and one decode, then forgotten (as MnnEngine does)."""
        self.prefill([IM_END] * max(tokens, 1))
        self.decode(IM_END)
        self.reset()
        self.warmup_ms = 0.1
        return self.warmup_ms

    def close(self) -> None:
        """Forget everything."""
        self.loaded = False
        self.history = []

    # -- text
    def encode(self, text: str) -> list[int]:
        """Greedy longest match over the vocabulary's bytes (every single byte is a token)."""
        data, ids, i = text.encode(), [], 0
        while i < len(data):
            for n in range(min(self._longest, len(data) - i), 0, -1):
                token = self._ids.get(data[i : i + n])
                if token is not None:
                    ids.append(token)
                    i += n
                    break
        return ids

    def apply_chat_template(self, messages: Sequence[tuple[str, str]]) -> str:
        """ChatML, as SmolLM2's template renders it."""
        turns = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages)
        return turns + "<|im_start|>assistant\n"

    def token_bytes(self, token: int) -> bytes:
        """Raw bytes of one token."""
        return self.tokens.bytes_of(token)

    def special_id(self, text: str) -> int | None:
        """Id of the token whose bytes are exactly `text`."""
        return self._ids.get(text.encode())

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""
        return len(self.tokens)

    # -- compute
    def prefill(self, ids: Sequence[int]) -> Logits:
        """Append ids; the script restarts at the reply's first token."""
        self._forward(ids)
        self._decoded = 0
        return self._logits()

    def prefill_all(self, ids: Sequence[int]) -> Logits:
        """Every position's logits: the scripted one at each."""
        self.prefill(ids)
        return np.stack([self._logits()] * len(ids))

    def decode(self, token: int) -> Logits:
        """Append one token; the script moves on."""
        self._forward([token])
        self._decoded += 1
        return self._logits()

    @property
    def draft_max(self) -> int:
        """Longest draft verify() takes (from the EngineConfig, like MnnEngine)."""
        return self.config.draft_max

    def verify(self, ids: Sequence[int]) -> Logits:
        """Several tokens in one forward: the rows a decode of each would have given."""
        if not 1 < len(ids) <= self.draft_max + 1:
            raise ValueError(f"verify takes 2..{self.draft_max + 1} tokens, got {len(ids)}")
        if self._verified_at is None:
            self._verified_at = len(self.history)
        self._forward(ids)
        rows = []
        for _ in ids:
            self._decoded += 1
            rows.append(self._logits())
        return np.stack(rows)

    @property
    def draft_costs(self) -> DraftCosts:
        """The prior (+15% a drafted token): no real kernels to price."""
        return PRIOR_DRAFT_COSTS

    @property
    def logit_tolerance(self) -> float:
        """Exact unless near-ties are scripted; then the skew they get in batched rows, with room."""
        return 2 * TIE_SKEW if self.near_ties else 0.0

    def rewind(self, count: int) -> None:
        """Drop the last `count` tokens; the script steps back with them."""
        if not 0 <= count <= len(self.history):
            raise ValueError(f"cannot rewind {count} of {len(self.history)}")
        del self.history[len(self.history) - count :]
        self.position -= count
        self._decoded = max(self._decoded - count, 0)
        if self._verified_at is not None and self._verified_at >= len(self.history):
            self._verified_at = None

    def _forward(self, ids: Sequence[int]) -> None:
        if not self.loaded:
            raise Unavailable("the fake engine is not loaded")
        if not ids:
            raise ValueError("empty forward")
        if self.position + len(ids) > self.context_length:
            raise ValueError(f"position {self.position + len(ids)} past the context {self.context_length}")
        if self.step_s:
            time.sleep(self.step_s)
        self.forwards += 1
        self.history.extend(ids)
        self.position += len(ids)

    def _logits(self) -> Logits:
        k = self._decoded
        if k < len(self.reply):
            target = self.reply[k]
        else:
            target = self.reply[k % len(self.reply)] if self.endless else IM_END
        logits = np.zeros(self.vocab_size, dtype=np.float32)
        logits[target] = PEAK
        if k in self.near_ties:
            runner_up = (target + 1) % self.vocab_size
            logits[runner_up] = PEAK - TIE_SKEW / 2 + (TIE_SKEW if self._verified_at is not None else 0.0)
        return logits

    # -- cache edits
    def reset(self) -> None:
        """Empty the cache."""
        self.history = []
        self._verified_at = None
        self.position = 0

    def truncate(self, keep: int) -> None:
        """Keep the first `keep` tokens; positions re-base to `keep`."""
        if keep < len(self.history):
            del self.history[keep:]
            self.position = keep
            if self._verified_at is not None and self._verified_at >= keep:
                self._verified_at = None

    def erase(self, begin: int, end: int) -> None:
        """Drop [begin, end); positions stay absolute (like MnnEngine's erase)."""
        if not 0 <= begin < end <= len(self.history):
            raise ValueError(f"bad erase range [{begin}, {end}) of {len(self.history)}")
        del self.history[begin:end]
