"""When a measured choice has gone stale: the live decode rate against the rate it was chosen at.

The thread count (autotune) and the forward costs (a decode step's time) are measured at load and cached
per (artifact, CPUs, engine settings) in the data dir. If the machine was busy while they were
timed, they stay wrong at every later start. `RateWatch` compares each finished request's decode
rate with the rate the choice promised; when the last WINDOW comparable requests all ran below
RATIO of it, the choice is due for a re-check. The re-check itself runs at the next idle moment
(`DaemonCore.retune_when_idle`), never during a request.

Comparable: at least MIN_TOKENS decoded, no output constraint (its token masks cost time of their
own) and no governor throttling (a rung below the fastest or pacing slows decode on purpose).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

WINDOW = 3  # comparable requests in a row: one slow request is noise, three are a pattern
RATIO = 0.5  # live/measured below this is a wrong measurement, not context length or sampling
MIN_TOKENS = 16  # shorter requests time too few steps to judge


@dataclass
class RateWatch:
    """Live decode rates against `expected_tps`; `observe` says when the choice looks stale."""

    expected_tps: float  # what the measured choice promised (0: nothing to compare with)
    rates: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def observe(
        self, decode_tps: float, tokens: int, throttled: bool = False, constrained: bool = False
    ) -> str:
        """Record one finished request; the reason a re-check is due, or ''."""
        if self.expected_tps <= 0 or tokens < MIN_TOKENS or throttled or constrained or decode_tps <= 0:
            return ""
        self.rates.append(decode_tps)
        if len(self.rates) < WINDOW or max(self.rates) >= RATIO * self.expected_tps:
            return ""
        live = statistics.median(self.rates)
        self.rates.clear()
        return f"live decode {live:.1f} tok/s < {RATIO:g}x the measured {self.expected_tps:.1f}"
