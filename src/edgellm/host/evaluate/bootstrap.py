"""Paired block bootstrap over scored tokens: 95% intervals for perplexities and their differences.

Every model is scored on the same tokens, so differences are *paired*: one resample of blocks is
applied to every model at once, and the interval of ``ppl_a − ppl_b`` comes from the same
replicates. Units are blocks of ``block`` consecutive scored tokens inside one document (a
document's last block may be shorter), so the interval respects the correlation between
neighbouring tokens that a token-level bootstrap would ignore. Percentile intervals, fixed seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

BLOCK = 128
REPLICATES = 2000


@dataclass(frozen=True)
class Interval:
    """A point estimate and its 95% percentile interval."""

    value: float
    low: float
    high: float

    def excludes_zero(self) -> bool:
        """Whether the interval lies strictly on one side of zero (a significant difference)."""
        return self.low > 0 or self.high < 0

    def to_json(self) -> dict[str, float]:
        """Rounded for reports."""
        return {k: round(v, 4) for k, v in asdict(self).items()}


def block_ids(doc_lengths: Sequence[int], block: int = BLOCK) -> np.ndarray:
    """Unit id of every scored token: documents of ``n`` scored tokens cut into ``block``-token units."""
    ids = []
    next_id = 0
    for n in doc_lengths:
        ids.append(next_id + np.arange(n) // block)
        next_id += -(-n // block)
    return np.concatenate(ids) if ids else np.zeros(0, dtype=int)


class PairedBootstrap:
    """Resampled mean NLLs of several models scored on the same tokens."""

    def __init__(
        self,
        nll: dict[str, np.ndarray],
        units: np.ndarray,
        replicates: int = REPLICATES,
        seed: int = 0,
    ) -> None:
        sizes = {len(v) for v in nll.values()}
        if sizes != {len(units)}:
            raise ValueError(f"every model must score the same {len(units)} tokens, got {sorted(sizes)}")
        n_units = int(units.max()) + 1
        counts = np.bincount(units, minlength=n_units).astype(np.float64)
        draw = np.random.default_rng(seed).integers(0, n_units, size=(replicates, n_units))
        n = counts[draw].sum(axis=1)  # [R]
        self.point = {k: float(v.mean()) for k, v in nll.items()}
        self.replicates = {
            k: np.bincount(units, weights=v, minlength=n_units)[draw].sum(axis=1) / n for k, v in nll.items()
        }
        self.tokens = len(units)
        self.units = n_units

    def _interval(self, value: float, reps: np.ndarray) -> Interval:
        low, high = np.percentile(reps, [2.5, 97.5])
        return Interval(value, float(low), float(high))

    def ppl(self, name: str) -> Interval:
        """Perplexity of one model."""
        return self._interval(float(np.exp(self.point[name])), np.exp(self.replicates[name]))

    def delta(self, name: str, base: str) -> Interval:
        """``ppl(name) − ppl(base)``: negative means ``name`` is better."""
        value = float(np.exp(self.point[name]) - np.exp(self.point[base]))
        return self._interval(value, np.exp(self.replicates[name]) - np.exp(self.replicates[base]))

    def removed(self, name: str, base: str, fp: str) -> Interval:
        """Fraction of ``base``'s perplexity increase over ``fp`` that ``name`` removes."""

        def frac(m: np.ndarray, b: np.ndarray, f: np.ndarray) -> np.ndarray:
            out: np.ndarray = (np.exp(b) - np.exp(m)) / (np.exp(b) - np.exp(f))
            return out

        p = {k: np.asarray(v) for k, v in self.point.items()}
        value = float(frac(p[name], p[base], p[fp]))
        r = self.replicates
        return self._interval(value, frac(r[name], r[base], r[fp]))
