"""Measure each rung on this phone at start: its decode speed and the die-skin gap it settles at.

While the phone is still cool (skin at least `margin_c` under the aim) the governor holds each rung
for `hold_s` seconds of decoding, coolest first (so the first minute is never a sprint), plus the
coolest at duty 1/2 to find the idle gap. The die settles in 5-15 s; the steady gap is the
asymptote of g(t) = g_ss + A·exp(−t/τ) fitted over the hold (a small grid over τ, linear least
squares for g_ss and A). Pure: readings and times in, a Frontier out (STYLE 12).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.frontier import Frontier, Point

TAU_GRID_S = tuple(float(t) for t in range(2, 31, 2))


def settled_gap(times: Sequence[float], gaps: Sequence[float]) -> float:
    """Asymptote of a first-order response through the samples (least squares over a grid of τ)."""
    t = np.asarray(times, dtype=float) - times[0]
    g = np.asarray(gaps, dtype=float)
    if len(t) < 4:
        return float(g[-1])
    best_sse, best = math.inf, float(g[-1])
    for tau in TAU_GRID_S:
        basis = np.stack([np.ones_like(t), np.exp(-t / tau)], axis=1)
        coef, *_ = np.linalg.lstsq(basis, g, rcond=None)
        sse = float(np.sum((basis @ coef - g) ** 2))
        if sse < best_sse:
            best_sse, best = sse, float(coef[0])
    return best


class Prober:
    """The probing schedule and its measurements; `done` once every rung was held or it had to stop."""

    def __init__(self, ladder: Sequence[Actuation], hold_s: float = 40.0, margin_c: float = 1.5) -> None:
        coolest = ladder[-1]
        self.plan: list[Actuation] = [replace(coolest, duty=0.5), *reversed(ladder)]
        self.hold_s, self.margin_c = hold_s, margin_c
        self.step = 0
        self.held = 0.0
        self.samples: list[tuple[float, float, float]] = []  # (decode time, gap, tokens/s)
        self.results: list[tuple[Actuation, float, float]] = []
        self.stopped = False
        self.last_t: float | None = None

    @property
    def done(self) -> bool:
        """Whether probing is over (all held, or stopped because the skin got near the aim)."""
        return self.stopped or self.step >= len(self.plan)

    @property
    def current(self) -> Actuation:
        """What to run now."""
        return self.plan[min(self.step, len(self.plan) - 1)]

    def add(self, now: float, skin_c: float, aim_c: float, gap_k: float, tokens_per_second: float) -> None:
        """One reading while probing; the probe clock only runs while the engine decodes."""
        dt = 0.0 if self.last_t is None else min(max(now - self.last_t, 0.0), 10.0)
        self.last_t = now
        if self.done:
            return
        if skin_c > aim_c - self.margin_c:
            self.stopped = True  # no room left to try hotter rungs: keep what was measured
            return
        if tokens_per_second <= 0:
            return  # idle: nothing to measure
        self.held += dt
        self.samples.append((self.held, gap_k, tokens_per_second))
        if self.held >= self.hold_s:
            times = [s[0] for s in self.samples]
            gap = settled_gap(times, [s[1] for s in self.samples])
            late = [s[2] for s in self.samples if s[0] >= self.hold_s / 2]
            self.results.append((self.current, gap, sum(late) / len(late)))
            self.step += 1
            self.held, self.samples = 0.0, []

    def frontier(self, min_duty: float) -> Frontier | None:
        """The measured frontier, or None when too little was measured (the half-duty point and one rung)."""
        if len(self.results) < 2:
            return None
        (_, half_gap, _), (_, full_gap, _) = self.results[0], self.results[1]
        idle = max(2.0 * half_gap - full_gap, 0.0)  # the gap is linear in duty: g(d) = idle + d·(g(1) − idle)
        points = [Point(act, gap, tps) for act, gap, tps in self.results[1:]]
        try:
            return Frontier(points, idle, min_duty)
        except ValueError:
            return None
