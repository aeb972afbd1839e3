"""Log-probabilities of chosen tokens: one logits row scored, or a prompt teacher-forced.

The numbers are the log-softmax of the logits the sampler chose from (docs/gateway.md,
"Logprobs"): after logit_bias, penalties and a constraint's mask, before temperature and
truncation, so a greedy choice is always the top-1 entry. Computed only for requests that ask.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAX_TOP_LOGPROBS = 20  # OpenAI's limit


@dataclass(frozen=True)
class TokenScore:
    """One token's logprob (None: a prompt's first token) and the best `top` alternatives, best first."""

    token: int
    logprob: float | None
    top: tuple[tuple[int, float], ...] = ()


def log_softmax(x: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """log p over a [vocab] logits row, in float64 (-inf logits, e.g. masked tokens, stay -inf)."""
    z = np.asarray(x, dtype=np.float64).reshape(-1)
    peak = float(z.max())
    out: npt.NDArray[np.float64] = z - (peak + np.log(np.exp(z - peak).sum()))
    if not np.isfinite(out.max()):  # numerical guard: a row of NaN/inf logits is an engine fault
        raise FloatingPointError("logits have no finite maximum")
    return out


def top_entries(logp: npt.NDArray[np.float64], n: int) -> tuple[tuple[int, float], ...]:
    """The `n` most likely tokens, best first (ties by id)."""
    if n <= 0:
        return ()
    n = min(n, logp.size)
    idx = np.argpartition(-logp, n - 1)[:n]  # O(V), then sort just these
    idx = idx[np.lexsort((idx, -logp[idx]))]
    return tuple((int(i), float(logp[i])) for i in idx)


def score_row(x: npt.NDArray[np.floating], token: int, top_n: int) -> TokenScore:
    """`token`'s logprob under logits row `x`, with the `top_n` best alternatives."""
    logp = log_softmax(x)
    return TokenScore(token, float(logp[token]), top_entries(logp, top_n))


def score_prompt(rows: npt.NDArray[np.floating], ids: Sequence[int], top_n: int) -> list[TokenScore]:
    """Each prompt token's logprob given the ones before it; rows[i] are the logits after ids[i].

    rows: [len(ids), vocab]. The first token has no logprob (nothing precedes it); the last row
    predicts the first generated token and is not used here.
    """
    out = [TokenScore(ids[0], None)] if ids else []
    for i in range(1, len(ids)):
        out.append(score_row(rows[i - 1], ids[i], top_n))
    return out


@dataclass(frozen=True)
class Logprob:
    """A TokenScore with each token's bytes, as the wire carries it (TokenLogprob)."""

    token: int
    text: bytes
    logprob: float | None
    top: tuple[Logprob, ...] = ()


def labelled(score: TokenScore, token_bytes: Callable[[int], bytes]) -> Logprob:
    """SCORE with its tokens' bytes (the gateway has no tokenizer)."""
    top = tuple(Logprob(t, token_bytes(t), lp) for t, lp in score.top)
    return Logprob(score.token, token_bytes(score.token), score.logprob, top)
