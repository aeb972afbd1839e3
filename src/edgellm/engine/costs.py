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


@dataclass(frozen=True)
class DraftCosts:
    """What a forward of n tokens costs, in decode steps (n = 1 is 1.0): the prices the draft policy
    weighs draft lengths by. Fixed per engine and settings, never timed.

    Why not the timings taken at load (`ForwardCosts`): the draft lengths chosen decide which
    positions run batched, batched logits differ slightly from one-token ones on W4A8
    (docs/engine.md), and `fast` takes greedy choices on them, so timing-driven lengths made the same
    `fast` request answer differently after a restart that timed differently (issue 31). With fixed
    prices a request's draft lengths depend only on its tokens (docs/speculation.md, "Determinism").
    """

    steps: tuple[tuple[int, float], ...]  # (forward length, cost in decode steps), lengths ascending

    def estimate(self, length: int) -> float:
        """Cost of a forward of `length` tokens in decode steps (unlisted: +15% per extra token)."""
        for n, cost in self.steps:
            if n == length:
                return cost
        # The prior for an unlisted length: on the pessimistic side of short verifies here.
        return 1.0 + 0.15 * (length - 1)


# Decode steps per forward of 1, 2, 3, 5 and 9 tokens (a verify of 1, 2, 4, 8 drafts plus its rewind)
# with MNN 3.6.1's W4A8 kernels (`memory: low`): medians of `measure_forward_costs`, SmolLM2-135M
# INT4, x86 AVX2, 2 threads, quiet machine, 2026-12-05: 6.8 / 7.7 / 8.4 / 13.4 / 28.5 ms, rounded up
# a little. A 9-token forward is ~4 steps here (the LM head runs for every row, 49,152 x 576 each),
# so 8-token drafts pay only on near-certain copying; larger models amortise verifies better, so
# these prices err on the side of drafting too little there, never too much.
W4A8_DRAFT_COSTS = DraftCosts(((1, 1.0), (2, 1.15), (3, 1.25), (5, 2.0), (9, 4.2)))
# The prior alone (+15% per extra token): engines with no measured table (the fake engine, tests).
PRIOR_DRAFT_COSTS = DraftCosts(())
# Float weights (`memory: normal`/`high`): batches are exact there, so these prices change speed only.
FLOAT_DRAFT_COSTS = DraftCosts(((1, 1.0), (2, 1.15), (3, 1.25), (5, 2.0), (9, 4.2)))
