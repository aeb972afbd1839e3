"""Token sampling over one logits vector: penalties, bias, temperature, top-k/top-p/min-p."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from edgellm.common.errors import InvalidArgument
from edgellm.device.logprobs import TokenScore, score_row

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class SamplingConfig:
    """Validated sampling parameters; temperature 0 means greedy."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    seed: int | None = None

    def validate(self, vocab_size: int) -> None:
        """Raise InvalidArgument on any out-of-range value."""
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise InvalidArgument(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k < 0:
            raise InvalidArgument(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 <= self.top_p <= 1.0:
            raise InvalidArgument(f"top_p must be in [0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise InvalidArgument(f"min_p must be in [0, 1], got {self.min_p}")
        if not np.isfinite(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise InvalidArgument(f"repetition_penalty must be > 0 (1 = off), got {self.repetition_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not np.isfinite(value) or abs(value) > 2.0:
                raise InvalidArgument(f"{name} must be in [-2, 2], got {value}")
        self._check_logit_bias(vocab_size)

    def _check_logit_bias(self, vocab_size: int) -> None:
        for token, bias in self.logit_bias.items():
            if not 0 <= token < vocab_size:
                raise InvalidArgument(f"logit_bias token id {token} outside the vocabulary [0, {vocab_size})")
            if not (np.isfinite(bias) or bias == -np.inf):
                raise InvalidArgument(f"logit_bias for token {token} must be finite or -inf")

    @property
    def greedy(self) -> bool:
        """True when sampling reduces to argmax."""
        return self.temperature == 0.0 or self.top_k == 1


class Sampler:
    """Stateful sampler for one request: owns its RNG and the generated-token counts."""

    def __init__(self, config: SamplingConfig) -> None:
        self.config = config
        self._rng = np.random.default_rng(config.seed)
        self._counts: Counter[int] = Counter()  # generated tokens: presence/frequency penalties
        self._seen: set[int] = set()  # prompt + generated: repetition penalty (HF/llama.cpp style)

    def observe_prompt(self, tokens: list[int]) -> None:
        """Record prompt tokens (they count for the repetition penalty only)."""
        self._seen.update(tokens)

    def observe(self, token: int) -> None:
        """Record a generated token."""
        self._counts[token] += 1
        self._seen.add(token)

    def sample(self, logits: FloatArray) -> int:
        """Pick the next token id from a [vocab] logits vector."""
        return self._pick(self._adjust(np.asarray(logits, dtype=np.float32).reshape(-1)))

    def choose(self, logits: FloatArray, top_n: int) -> tuple[int, TokenScore]:
        """`sample(logits)`, and the chosen token's logprob from the same adjusted logits.

        One adjusted vector serves both, so the reported distribution is the one the choice was
        made from (before temperature and truncation): a greedy choice is its top-1 entry.
        """
        x = self._adjust(np.asarray(logits, dtype=np.float32).reshape(-1))
        token = self._pick(x)
        return token, score_row(x, token, top_n)

    def _pick(self, x: FloatArray) -> int:
        if self.config.greedy:
            return int(np.argmax(x))
        idx, p = self._distribution(x)
        return int(idx[self._rng.choice(p.size, p=p)])

    def decide(self, logits: FloatArray, tolerance: float) -> int | None:
        """`sample(logits)` for logits that may sit up to `tolerance` from the reference; None when unsure.

        Greedy only: the argmax when its lead over the runner-up exceeds `tolerance` (then the
        reference logits, which differ by a spread of at most `tolerance`, have the same argmax),
        else None (the caller recomputes the reference logits). Sampled decoding always samples:
        its rule keeps the distribution of whatever logits it is given (docs/speculation.md).
        """
        x = self._adjust(np.asarray(logits, dtype=np.float32).reshape(-1))
        if not self.config.greedy:
            idx, p = self._distribution(x)
            return int(idx[self._rng.choice(p.size, p=p)])
        return _sure_argmax(x, tolerance * self._stretch)

    def verify_within(self, logits: FloatArray, draft: int, tolerance: float) -> int | None:
        """`verify(logits, draft)` on logits up to `tolerance` from the reference; None if unsure."""
        if not self.config.greedy:
            return self.verify(logits, draft)
        x = self._adjust(np.asarray(logits, dtype=np.float32).reshape(-1))
        return _sure_argmax(x, tolerance * self._stretch)

    @property
    def _stretch(self) -> float:
        """How much the penalties can widen a difference between two logit vectors (the repetition
        penalty scales logits by rp or 1/rp; additive penalties and biases move both alike)."""
        rp = self.config.repetition_penalty
        return max(rp, 1.0 / rp)

    def verify(self, logits: FloatArray, draft: int) -> int:
        """The token to emit where `draft` was proposed: `draft` itself when accepted, else a replacement.

        Greedy: accepted iff it is the argmax. Sampled: the speculative-sampling rule for a draft
        that puts all its probability on one token (prompt lookup): accept with probability
        p(draft), otherwise sample from p with the draft removed, renormalised. The emitted
        token is then distributed exactly as `sample(logits)` (Leviathan et al. 2023, Theorem 1).
        """
        x = self._adjust(np.asarray(logits, dtype=np.float32).reshape(-1))
        if self.config.greedy:
            return int(np.argmax(x))
        idx, p = self._distribution(x)
        hit = np.flatnonzero(idx == draft)
        p_draft = float(p[hit[0]]) if hit.size else 0.0
        if p_draft > 0.0 and self._rng.random() < p_draft:
            return draft
        if hit.size:
            p = p.copy()
            p[hit[0]] = 0.0
            p /= p.sum()
        return int(idx[self._rng.choice(p.size, p=p)])

    def _distribution(self, x: FloatArray) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Candidate ids and their probabilities after temperature, top-k, top-p and min-p."""
        cfg = self.config
        x = x / cfg.temperature
        # Candidate set: top-k first (argpartition is O(V)), then sort just the candidates.
        k = cfg.top_k if 0 < cfg.top_k < x.size else x.size
        if k == x.size and not 0.0 < cfg.top_p < 1.0 and cfg.min_p <= 0.0:
            # Why no sort: with no cut the whole vocabulary is the support, in any order; sorting
            # 49,152 logits per token cost 6.35 ms, 40% of sampled decode (docs/benchmarks.md).
            p = np.exp(x.astype(np.float64) - float(x.max()))
            return np.arange(x.size), p / p.sum()
        if k < x.size:
            idx = np.argpartition(-x, k - 1)[:k]
            idx = idx[np.argsort(-x[idx], kind="stable")]
            z = x[idx].astype(np.float64)
            p = np.exp(z - z[0])
            p /= p.sum()
        else:
            idx, p = _head(x, cfg.top_p, cfg.min_p)
        keep = p.size
        if 0.0 < cfg.top_p < 1.0:
            keep = min(keep, int(np.searchsorted(np.cumsum(p), cfg.top_p) + 1))
        if cfg.min_p > 0.0:
            keep = min(keep, max(1, int(np.count_nonzero(p >= cfg.min_p * p[0]))))
        return idx[:keep], p[:keep] / p[:keep].sum()

    def _adjust(self, x: FloatArray) -> FloatArray:
        cfg = self.config
        penalise = cfg.repetition_penalty != 1.0 and self._seen
        count_penalties = (cfg.presence_penalty or cfg.frequency_penalty) and self._counts
        if not (cfg.logit_bias or penalise or count_penalties):
            return x
        x = x.copy()
        if penalise:
            ids = np.fromiter(self._seen, dtype=np.int64)
            seen = x[ids]
            # CTRL-style: shrink positive logits, push negative ones further down.
            x[ids] = np.where(seen > 0, seen / cfg.repetition_penalty, seen * cfg.repetition_penalty)
        if count_penalties:
            ids = np.fromiter(self._counts.keys(), dtype=np.int64)
            counts = np.fromiter(self._counts.values(), dtype=np.float32)
            x[ids] -= cfg.presence_penalty + cfg.frequency_penalty * counts
        for token, bias in cfg.logit_bias.items():
            x[token] += bias
        return x


def _head(x: FloatArray, top_p: float, min_p: float) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The leading tokens in descending order (ties by id) that a top-p/min-p cut can keep, and
    their probabilities over the whole vocabulary.

    Why not sort everything: a stable sort of 49,152 logits costs ~6 ms per token, most of a
    decode step, while the nucleus of a chat model is usually a few tokens. The head grows
    (64, 256, ... tokens) until its mass reaches top_p; every token left out is strictly below
    every token kept, so the order and the cut are those of a full sort.
    """
    z = x.astype(np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    if not 0.0 < top_p < 1.0:  # min-p alone: exactly the tokens it keeps
        idx = _by_logit(x, np.flatnonzero(p >= min_p * p.max()))
        return idx, p[idx]
    size = 64
    while size < x.size:
        edge = np.partition(x, x.size - size)[x.size - size]  # the size-th largest logit
        idx = _by_logit(x, np.flatnonzero(x >= edge))
        if p[idx].sum() >= top_p:
            return idx, p[idx]
        size *= 4
    idx = _by_logit(x, np.arange(x.size))
    return idx, p[idx]


def _by_logit(x: FloatArray, idx: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """`idx` (ascending ids) ordered by descending logit, ties by id, as a stable full sort orders them."""
    return idx[np.argsort(-x[idx], kind="stable")]


def _sure_argmax(x: FloatArray, tolerance: float) -> int | None:
    """The argmax of x if it leads the runner-up by more than `tolerance`, else None."""
    best = int(np.argmax(x))
    lead = x[best]
    x = x.copy()
    x[best] = -np.inf
    return best if float(lead - x.max()) > tolerance else None
