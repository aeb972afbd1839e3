"""Measured seconds per forward length: what the engine costs, which drafting and autotune read."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class ForwardCosts:
    """Seconds per forward by length (1 = a plain decode step): medians of the timings taken at load.

    Why frozen after load rather than updated by every request: the draft lengths chosen decide
    which positions run batched, and batched logits differ slightly from one-token ones
    (docs/engine.md); timing-driven choices would make the same greedy request answer differently
    from one run to the next. With costs fixed per load, a request's drafts depend only on its text.
    """

    samples: dict[int, list[float]] = field(default_factory=dict)

    def record(self, length: int, seconds: float) -> None:
        """Add one timed forward of `length` tokens."""
        self.samples.setdefault(length, []).append(seconds)

    @property
    def seconds(self) -> dict[int, float]:
        """The median seconds per forward length."""
        return {n: statistics.median(v) for n, v in self.samples.items() if v}

    @classmethod
    def fixed(cls, seconds: dict[int, float]) -> ForwardCosts:
        """Costs given rather than measured (tests, benches)."""
        return cls({n: [s] for n, s in seconds.items()})

    def estimate(self, length: int) -> float | None:
        """Expected seconds for a forward of `length` tokens (None until a decode step was timed)."""
        seconds = self.seconds
        if length in seconds:
            return seconds[length]
        base = seconds.get(1)
        # Unmeasured: a prior of +15% per extra token over a decode step, on the pessimistic side of
        # short verifies here (bench/bench_verify.py).
        return None if base is None else base * (1.0 + 0.15 * (length - 1))
