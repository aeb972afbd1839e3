"""The efficient frontier of the ladder, measured on this phone: the fastest actuation for any heat budget.

Each rung was measured at duty 1 (governor/probe.py): its decode speed and the die-skin gap it
settles at (the gap is proportional to the power the phone dissipates). Running a share of the
time on one rung and the rest on another mixes both linearly, and so does pacing (a mix with
idle), so the best speed for a gap is the upper concave hull of the points (gap, speed) plus the
idle point (idle gap, 0). Rungs under the hull are dominated (slower for the same heat: a prime
core waiting at a barrier for slower cores, a single big core next to three little ones) and are
never used. A position p runs from 0 (the fastest hull rung) along the hull edges to the idle end.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from edgellm.device.governor.actuation import Actuation


@dataclass(frozen=True)
class Point:
    """One rung as measured here: decode speed and the die-skin gap it settles at."""

    actuation: Actuation
    gap_k: float
    tokens_per_second: float


def upper_hull(points: Sequence[Point], idle_gap_k: float) -> list[Point]:
    """Points on the upper concave hull, fastest first (idle excluded); dominated ones are dropped."""
    pts = sorted(points, key=lambda p: (p.gap_k, -p.tokens_per_second))
    best = max(pts, key=lambda p: (p.tokens_per_second, -p.gap_k))
    pts = [p for p in pts if p.gap_k <= best.gap_k and p.gap_k > idle_gap_k]
    chain: list[tuple[float, float, Point | None]] = [(idle_gap_k, 0.0, None)]
    for p in pts:
        x, y = p.gap_k, p.tokens_per_second
        while len(chain) >= 2:
            (x1, y1, _), (x2, y2, _) = chain[-2], chain[-1]
            if (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1) >= 0:  # chain[-1] is on or under the new edge
                chain.pop()
            else:
                break
        if y > chain[-1][1]:
            chain.append((x, y, p))
    return [p for _, _, p in reversed(chain) if p is not None]


class Frontier:
    """Positions along the hull ↔ gaps ↔ actuations."""

    def __init__(self, points: Sequence[Point], idle_gap_k: float, min_duty: float = 0.05) -> None:
        self.points = list(points)  # every measured rung, the dominated ones too (a new idle re-hulls)
        self.hull = upper_hull(points, idle_gap_k)
        if not self.hull:
            raise ValueError("no measured rung beats idle")
        self.idle_gap_k = self.hulled_at_k = idle_gap_k
        self.min_duty = min_duty
        self.edges = len(self.hull) - 1  # blend edges; the duty segment follows

    def rehull(self) -> bool:
        """Recompute the hull for the present idle gap (once learnt); return whether it changed.

        The idle end is guessed at start; on a hot phone the static power alone holds the die ~2 K
        over the skin, the guess sits far under that, and the cool rungs fall under the hull through
        a too-low idle point — so the learnt idle must re-rank them.
        """
        hull = upper_hull(self.points, self.idle_gap_k)
        self.hulled_at_k = self.idle_gap_k
        if not hull or [p.actuation for p in hull] == [p.actuation for p in self.hull]:
            return False
        self.hull, self.edges = hull, len(hull) - 1
        return True

    @property
    def max_position(self) -> float:
        """The coolest end: the last hull rung at min_duty."""
        return self.edges + math.log2(1.0 / self.min_duty)

    @property
    def max_gap_k(self) -> float:
        """The hottest point on the hull (the fastest rung)."""
        return self.hull[0].gap_k

    @property
    def min_gap_k(self) -> float:
        """The coolest point: the last rung at min_duty."""
        last = self.hull[-1]
        return self.idle_gap_k + self.min_duty * (last.gap_k - self.idle_gap_k)

    def position(self, gap_k: float) -> float:
        """The position whose steady gap is gap_k (clamped to the hull)."""
        if gap_k >= self.max_gap_k:
            return 0.0
        for k in range(self.edges):
            hot, cool = self.hull[k], self.hull[k + 1]
            if gap_k >= cool.gap_k:
                return k + (hot.gap_k - gap_k) / (hot.gap_k - cool.gap_k)
        last = self.hull[-1]
        duty = (gap_k - self.idle_gap_k) / (last.gap_k - self.idle_gap_k)
        return self.edges + math.log2(1.0 / max(min(duty, 1.0), self.min_duty))

    def gap(self, position: float) -> float:
        """The steady gap expected at a position."""
        p = min(max(position, 0.0), self.max_position)
        if p <= self.edges:
            k = min(int(p), self.edges - 1) if self.edges else 0
            if self.edges == 0:
                return self.hull[0].gap_k
            share = p - k
            return self.hull[k].gap_k + share * (self.hull[k + 1].gap_k - self.hull[k].gap_k)
        last = self.hull[-1]
        return float(self.idle_gap_k + 0.5 ** (p - self.edges) * (last.gap_k - self.idle_gap_k))

    def actuation(self, position: float) -> Actuation:
        """The actuation at a position: a time share between two hull rungs, or the last one paced."""
        p = min(max(position, 0.0), self.max_position)
        if p >= self.edges:
            last = self.hull[-1]
            duty = max(0.5 ** (p - self.edges), self.min_duty)
            return replace(last.actuation, duty=round(duty, 4)) if duty < 0.9999 else last.actuation
        k = int(p)
        hot, cool = self.hull[k], self.hull[k + 1]
        time_on_cool = p - k
        if time_on_cool < 1e-6:
            return hot.actuation
        # the actuators mix by token count: convert the time share into a token share
        tokens_cool = time_on_cool * cool.tokens_per_second
        tokens_hot = (1.0 - time_on_cool) * hot.tokens_per_second
        share_hot = tokens_hot / (tokens_hot + tokens_cool)
        hot_act = hot.actuation
        return replace(
            cool.actuation,
            blend_cpus=hot_act.cpus,
            blend=round(share_hot, 4),
            blend_freq_cap=hot_act.freq_cap,
        )

    def describe(self) -> str:
        """The hull as text, fastest first (for the decision log)."""
        parts = [
            f"{p.actuation.label}({p.tokens_per_second:.1f} tok/s, gap {p.gap_k:.1f} K)" for p in self.hull
        ]
        return " > ".join(parts) + f" > idle(gap {self.idle_gap_k:.1f} K)"
