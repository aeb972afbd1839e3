"""Measure each rung on this phone at start: its decode speed and the die-skin gap it settles at.

While the phone is still cool (skin at least `margin_c` under the aim) the governor holds each rung
for `hold_s` seconds of decoding, coolest first (so the first minute is never a sprint). The die
settles in 5-15 s; the steady gap is the asymptote of g(t) = g_ss + A·exp(−t/τ) fitted over the
hold (a small grid over τ, linear least squares for g_ss and A). Pure: readings and times in, a
Frontier out (STYLE 12).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.frontier import Frontier, Point

TAU_GRID_S = tuple(float(t) for t in range(2, 31))


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

    def __init__(
        self,
        ladder: Sequence[Actuation],
        hold_s: float = 40.0,
        margin_c: float = 1.5,
        idle_fraction: float = 0.5,
        speed_s: float = 10.0,
        headroom_share: float = 0.25,
        min_fit_s: float = 20.0,
    ) -> None:
        self.idle_fraction, self.speed_s = idle_fraction, speed_s
        self.headroom_share, self.min_fit_s = headroom_share, min_fit_s
        self.start_skin_c: float | None = None
        self.plan: list[Actuation] = list(reversed(ladder))
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

    def add(
        self,
        now: float,
        skin_c: float,
        aim_c: float,
        gap_k: float,
        tokens_per_second: float,
    ) -> None:
        """One reading while probing; the probe clock only runs while the engine decodes.

        Probing stops when the skin nears the aim; a rung that after `speed_s` is no faster than a
        cooler one is skipped without waiting for its gap (it is dominated: the ladder runs cool to
        hot). Stopping on the skin model's sustainable gap instead was tried and dropped: with
        minutes of data the model is still the prior, which stopped a phone with a 2.6 K/W hotspot
        after its first rung (0.53× the oracle).
        """
        dt = 0.0 if self.last_t is None else min(max(now - self.last_t, 0.0), 10.0)
        self.last_t = now
        if self.done:
            return
        if self.start_skin_c is None:
            self.start_skin_c = skin_c
        if self._out_of_room(skin_c, aim_c, self.start_skin_c):
            # no room left for hotter rungs (on a phone with 5 K of headroom, probing them all used 3 K
            # and cost minutes at a crawl afterwards): keep what was measured, a long-enough partial too
            if self.held >= self.min_fit_s:
                self._finish()
            self.stopped = True
            return
        if tokens_per_second <= 0:
            return  # idle: nothing to measure
        self.held += dt
        self.samples.append((self.held, gap_k, tokens_per_second))
        if self._dominated(dt):
            self.step += 1  # no faster than a cooler rung: dominated, move on
            self.held, self.samples = 0.0, []
            return
        if self.held >= self.hold_s:
            self._finish()

    def _out_of_room(self, skin_c: float, aim_c: float, start_skin_c: float) -> bool:
        """Whether the skin is near the aim, or probing used its share of the headroom it started with."""
        budget = self.headroom_share * (aim_c - start_skin_c)
        return skin_c > aim_c - self.margin_c or skin_c - start_skin_c > budget

    def _dominated(self, dt: float) -> bool:
        """Just past speed_s on this rung: whether it is no faster than a cooler rung already measured."""
        if not self.results or not self.speed_s <= self.held < self.speed_s + dt:
            return False
        speed = [x[2] for x in self.samples if x[0] >= 3.0]
        return bool(speed) and sum(speed) / len(speed) <= 1.03 * max(r[2] for r in self.results)

    def _finish(self) -> None:
        times = [s[0] for s in self.samples]
        gap = settled_gap(times, [s[1] for s in self.samples])
        late = [s[2] for s in self.samples if s[0] >= min(self.hold_s, self.held) / 2]
        self.results.append((self.current, gap, sum(late) / len(late)))
        self.step += 1
        self.held, self.samples = 0.0, []

    @property
    def remaining(self) -> int:
        """Rungs not yet measured (hotter than every measured one)."""
        return max(len(self.plan) - self.step, 0)

    def resume(self) -> None:
        """Measure the next hotter rung after all: the governor runs at the top of what it measured
        and the skin model says there is heat to spare (probing had stopped on the headroom rule)."""
        if self.remaining:
            self.stopped = False
            self.start_skin_c = None  # a fresh headroom budget from where the skin is now
            self.held, self.samples = 0.0, []

    def frontier(self, min_duty: float) -> Frontier | None:
        """The measured frontier over the rungs measured so far, or None when none was."""
        if not self.results:
            return None
        # The idle gap (static power) is not probed: a half-duty probe after the hot rungs settles
        # from 25 K down to 3 K and its fit was off by 3 K on a tuning phone, which dropped the best
        # rung from the hull. Half the coolest rung's gap is a cautious guess (sd8gen3 0.59, the
        # tuning phones 0.4-0.6): guessing high only makes pacing look worse than mixing rungs.
        idle = self.idle_fraction * self.results[0][1]
        points = [Point(act, gap, tps) for act, gap, tps in self.results]
        try:
            return Frontier(points, idle, min_duty)
        except ValueError:
            return None
