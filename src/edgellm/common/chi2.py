"""Chi-square checks that two samplers draw from one distribution (numpy only: no scipy on the phone).

Used by the speculative-sampling tests and bench/bench_spec_distribution.py: a token stream drawn
through draft verification must have the frequencies plain sampling has, within sampling error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

Z_0_001 = 3.090  # one-sided standard normal quantile for p = 0.001


@dataclass(frozen=True)
class Chi2Result:
    """The statistic, its degrees of freedom and the critical value at p = 0.001."""

    statistic: float
    dof: int
    critical: float

    @property
    def passed(self) -> bool:
        """True when the difference is within sampling error (no rejection at p = 0.001)."""
        return self.statistic <= self.critical


def critical_value(dof: int, z: float = Z_0_001) -> float:
    """Upper chi-square quantile by the Wilson-Hilferty cube approximation (accurate to ~1% for dof >= 3)."""
    d = max(dof, 1)
    return float(d * (1.0 - 2.0 / (9.0 * d) + z * np.sqrt(2.0 / (9.0 * d))) ** 3)


def goodness_of_fit(
    draws: Iterable[Hashable], probs: Mapping[Hashable, float], min_expected: float = 5.0
) -> Chi2Result:
    """Draws against known probabilities; outcomes expected fewer than `min_expected` times are pooled."""
    counts = Counter(draws)
    n = sum(counts.values())
    observed: list[float] = []
    expected: list[float] = []
    rest_o, rest_e = 0.0, 0.0
    for key, p in probs.items():
        if n * p >= min_expected:
            observed.append(counts.get(key, 0))
            expected.append(n * p)
        else:
            rest_o += counts.get(key, 0)
            rest_e += n * p
    rest_o += sum(c for k, c in counts.items() if k not in probs)
    if rest_e > 0 or rest_o > 0:
        observed.append(rest_o)
        expected.append(max(rest_e, 1e-9))
    o, e = np.asarray(observed, float), np.asarray(expected, float)
    dof = len(o) - 1
    return Chi2Result(float(((o - e) ** 2 / e).sum()), dof, critical_value(dof))


def two_sample(a: Iterable[Hashable], b: Iterable[Hashable], min_count: int = 10) -> Chi2Result:
    """Two samples of outcomes (any sizes): the homogeneity test over a 2 x K table, rare outcomes pooled."""
    ca, cb = Counter(a), Counter(b)
    na, nb = sum(ca.values()), sum(cb.values())
    rows: list[tuple[float, float]] = []
    pooled = [0.0, 0.0]
    for key in set(ca) | set(cb):
        x, y = ca.get(key, 0), cb.get(key, 0)
        if x + y >= min_count:
            rows.append((x, y))
        else:
            pooled[0] += x
            pooled[1] += y
    if sum(pooled) > 0:
        rows.append((pooled[0], pooled[1]))
    table = np.asarray(rows, float)  # [K, 2]
    total = table.sum(axis=1, keepdims=True)
    expected = total * np.asarray([[na, nb]], float) / (na + nb)
    stat = float(((table - expected) ** 2 / np.maximum(expected, 1e-9)).sum())
    dof = len(rows) - 1
    return Chi2Result(stat, dof, critical_value(dof))
