"""Perplexity, top-1 agreement and KL divergence accumulated over scoring windows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64: [T, V] -> [T, V]."""
    x = x.astype(np.float64)
    top = x.max(axis=-1, keepdims=True)
    out: np.ndarray = x - (np.log(np.exp(x - top).sum(axis=-1, keepdims=True)) + top)
    return out


@dataclass
class Accumulator:
    """Running sums for one model against the fp reference."""

    nll: float = 0.0
    kl: float = 0.0
    agree: int = 0
    n: int = 0
    n_ref: int = 0  # rows compared with the fp reference
    nonfinite: list[int] = field(default_factory=list)

    def add(self, logp: np.ndarray, targets: np.ndarray, ref_logp: np.ndarray | None) -> None:
        """Add scored rows: ``logp`` [n, V] predicting ``targets`` [n]; ``ref_logp`` [n, V] is fp."""
        if not np.isfinite(logp).all():
            raise FloatingPointError("non-finite logits")
        self.nll -= float(logp[np.arange(len(targets)), targets].sum())
        if ref_logp is not None:
            p_ref = np.exp(ref_logp)
            self.kl += float((p_ref * (ref_logp - logp)).sum())
            self.agree += int((logp.argmax(-1) == ref_logp.argmax(-1)).sum())
            self.n_ref += len(targets)
        self.n += len(targets)

    def result(self) -> dict[str, float]:
        """Perplexity; mean KL(fp‖model) per token and top-1 agreement with fp only when compared with fp."""
        out = {"ppl": math.exp(self.nll / self.n), "tokens": float(self.n)}
        if self.n_ref == self.n:
            out |= {"kl": self.kl / self.n, "top1": self.agree / self.n}
        return out
