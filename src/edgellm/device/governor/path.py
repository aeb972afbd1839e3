"""A continuous throttle position over the ladder: blend neighbouring rungs, then pace the last one.

Position x in [0, len(ladder) − 1] runs rung ⌊x⌋ with a share x − ⌊x⌋ of decode tokens on rung
⌊x⌋ + 1 (the actuators interleave them in short blocks), so speed and heat move smoothly instead
of jumping a whole rung; past the last rung the decode duty halves every `halving` positions down
to min_duty (equal relative steps: near duty 0.2 a linear step of 0.025 was already 12% of speed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from edgellm.device.governor.actuation import Actuation


class LadderPath:
    """Maps a position to an Actuation; positions are quantised to `quantum` (fewer, clearer changes)."""

    def __init__(
        self, ladder: Sequence[Actuation], halving: float = 1.0, min_duty: float = 0.05, quantum: float = 0.05
    ) -> None:
        if not ladder:
            raise ValueError("the governor needs at least one rung")
        self.ladder = list(ladder)
        self.halving, self.min_duty, self.quantum = halving, min_duty, quantum

    @property
    def last(self) -> int:
        """Index of the coolest rung."""
        return len(self.ladder) - 1

    @property
    def max_position(self) -> float:
        """Deepest throttle: the last rung at min_duty."""
        return self.last + self.halving * math.log2(1.0 / self.min_duty)

    def quantise(self, x: float) -> float:
        """x clamped to the path and rounded to the quantum."""
        x = min(max(x, 0.0), self.max_position)
        return min(round(x / self.quantum) * self.quantum, self.max_position)

    def actuation(self, x: float) -> Actuation:
        """The operating point at position x."""
        x = min(max(x, 0.0), self.max_position)
        if x >= self.last:
            duty = max(0.5 ** ((x - self.last) / self.halving), self.min_duty)
            return replace(self.ladder[self.last], duty=round(duty, 4))
        k = math.floor(x)
        share = x - k
        base = self.ladder[k]
        if share < 1e-6:
            return base
        nxt = self.ladder[k + 1]
        return replace(base, blend_cpus=nxt.cpus, blend=round(share, 4), blend_freq_cap=nxt.freq_cap)
