"""The decode rate this phone sustains under its comfort limit, and the "thermal headroom exhausted" state.

Estimate (docs/governor.md, "Capacity"): the identified skin model (governor/identify.py) gives the
die-skin gap that holds the skin exactly at the comfort limit, g* = (limit − ambient) / gain; the
measured frontier (governor/frontier.py) gives the fastest operating point whose steady gap is g*
(time shares and pacing mix speed and heat linearly between the measured points and idle). Before
a frontier exists, the points are the idle gap measured while the engine idles and the operating
point measured while it decodes. A g* at or below the idle gap means the phone passes the limit
with the engine idle: nothing is sustainable. Pure (STYLE 12): readings and times in, a Capacity out.

Below the floor for `enter_after_s` the state becomes "thermal headroom exhausted"; it ends only
after the estimate has been back above `exit_factor` × the floor for `exit_after_s`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from edgellm.common.errors import REFUSAL_KEY, RETRY_AFTER_KEY, THERMAL_REFUSAL, ResourceExhausted
from edgellm.device.governor.frontier import Frontier
from edgellm.device.governor.identify import SkinModel


class CapacityState(StrEnum):
    """Whether the phone can sustain a useful decode rate under its comfort limit."""

    UNKNOWN = "unknown"  # no identified skin model, or nothing measured to rate it by, yet
    AVAILABLE = "available"
    EXHAUSTED = "thermal headroom exhausted"


# The thermal policy (`--thermal-policy comfort | throughput`, the governor's settings) that keeps
# serving while exhausted: the firmware throttles instead. Every other policy refuses.
SERVES_WHEN_EXHAUSTED = "throughput"


@dataclass(frozen=True)
class CapacityConfig:
    """The floor and the hysteresis of the exhausted state; times are the phone's seconds."""

    # Why 1 tok/s: the shipped profiles' reply (256 tokens) then takes over 4 minutes, and a reader
    # reads ~5 tok/s (250 words/min); below it a client waits minutes for a reply it would rather get
    # from another device. sd8gen3 in a warm case sustains 0.26 tok/s, at 25 °C 4 tok/s (docs/governor.md).
    floor_tokens_per_second: float = 1.0
    exit_factor: float = 1.5  # leave only once the estimate is this far above the floor ...
    enter_after_s: float = 30.0  # ... below the floor this long to enter (one reply's worth)
    exit_after_s: float = 120.0  # ... and above the exit level this long to leave (the skin: minutes)
    min_model_updates: int = 6  # identified windows (5 s apart) before the estimate is trusted
    idle_settle_s: float = 20.0  # the die settles 5-15 s after decoding stops: idle gap after this
    learn_s: float = 30.0  # EMA horizon of the measured idle gap and operating point
    retry_min_s: float = 30.0
    retry_max_s: float = 900.0


@dataclass(frozen=True)
class Capacity:
    """One estimate: tokens/s sustainable at the comfort limit (None: unknown) and the state."""

    tokens_per_second: float | None
    state: CapacityState
    basis: str = ""  # frontier | operating point | idle over the limit
    gap_budget_k: float | None = None  # g*: the die-skin gap that holds the skin at the limit
    retry_after_s: float = 0.0  # the phone's seconds; 0 unless exhausted


def speed_at(points: Sequence[tuple[float, float]], idle_gap_k: float, gap_k: float) -> float:
    """Tokens/s at a steady gap on the upper concave hull of (idle gap, 0) and the measured (gap, tok/s).

    Mixing two operating points in time mixes their speed and heat linearly, so every point under
    the hull is reachable (frontier.py); beyond the fastest point the speed stays its own, and at or
    below the idle gap it is 0.
    """
    if gap_k <= idle_gap_k or not points:
        return 0.0
    fastest = max(points, key=lambda p: p[1])
    chain: list[tuple[float, float]] = []
    for p in sorted([(idle_gap_k, 0.0), *(p for p in points if idle_gap_k < p[0] <= fastest[0])]):
        while len(chain) >= 2 and _cross(chain[-2], chain[-1], p) >= 0:  # chain[-1] is under the hull
            chain.pop()
        chain.append(p)
    for (g0, s0), (g1, s1) in itertools.pairwise(chain):
        if gap_k <= g1:
            return s0 + (s1 - s0) * (gap_k - g0) / (g1 - g0)
    return chain[-1][1]


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def frontier_points(frontier: Frontier) -> list[tuple[float, float]]:
    """Every measured rung as (gap, tok/s): speed_at hulls them against the idle gap it trusts."""
    return [(p.gap_k, p.tokens_per_second) for p in frontier.points]


class Hysteresis:
    """The exhausted state: below the floor enter_after_s to enter, above the exit level exit_after_s
    to leave (a band and two dwell times: an estimate that wanders around the floor does not flap)."""

    def __init__(self, config: CapacityConfig) -> None:
        self.config = config
        self.state = CapacityState.UNKNOWN
        self._since: float | None = None  # when the estimate crossed toward the other state

    def __call__(self, now: float, tokens_per_second: float | None) -> CapacityState:
        """Feed one estimate (None: unknown, which never refuses on a guess); return the state."""
        c = self.config
        if tokens_per_second is None:
            self.state, self._since = CapacityState.UNKNOWN, None
            return self.state
        if self.state != CapacityState.EXHAUSTED:
            self.state = CapacityState.AVAILABLE
            crossing, hold = tokens_per_second < c.floor_tokens_per_second, c.enter_after_s
        else:
            crossing, hold = tokens_per_second >= c.exit_factor * c.floor_tokens_per_second, c.exit_after_s
        if not crossing:
            self._since = None
            return self.state
        self._since = now if self._since is None else self._since
        if now - self._since >= hold:
            entering = self.state != CapacityState.EXHAUSTED
            self.state = CapacityState.EXHAUSTED if entering else CapacityState.AVAILABLE
            self._since = None
        return self.state


class CapacityEstimator:
    """Feed it each control period's model and measurements; `update` returns the Capacity."""

    def __init__(self, config: CapacityConfig | None = None) -> None:
        self.config = config or CapacityConfig()
        self.idle_gap_k: float | None = None  # measured while the engine idles
        self.operating: tuple[float, float] | None = None  # (gap, tok/s) measured while it decodes
        self.busy_since: float | None = None
        self.idle_since: float | None = None
        self.last_t: float | None = None
        self.hysteresis = Hysteresis(self.config)
        self.current = Capacity(None, CapacityState.UNKNOWN)

    def update(
        self,
        now: float,
        model: SkinModel,
        limit_c: float,
        gap_k: float | None,
        tokens_per_second: float,
        frontier: Frontier | None = None,
    ) -> Capacity:
        """One period: the die-skin gap now (None: no CPU zone), the decode rate (0 while idle)."""
        dt = 0.0 if self.last_t is None else min(max(now - self.last_t, 0.0), 10.0)
        self.last_t = now
        if gap_k is not None:
            self._measure(now, dt, gap_k, tokens_per_second)
        tps, basis, budget = self._estimate(model, limit_c, gap_k is not None, frontier)
        state = self.hysteresis(now, tps)
        retry = self._retry_after(model) if state == CapacityState.EXHAUSTED else 0.0
        self.current = Capacity(tps, state, basis, budget, retry)
        return self.current

    @property
    def state(self) -> CapacityState:
        """The state in force."""
        return self.hysteresis.state

    def _measure(self, now: float, dt: float, gap_k: float, tokens_per_second: float) -> None:
        """Learn the idle gap (engine idle and the die settled) and the operating point (decoding)."""
        c = self.config
        weight = min(dt / c.learn_s, 1.0)
        if tokens_per_second > 0:
            self.idle_since = None
            self.busy_since = now if self.busy_since is None else self.busy_since
            if now - self.busy_since >= c.idle_settle_s:  # the die has reached this operating point
                old = self.operating or (gap_k, tokens_per_second)
                self.operating = (
                    old[0] + (gap_k - old[0]) * weight,
                    old[1] + (tokens_per_second - old[1]) * weight,
                )
            return
        self.busy_since = None
        self.idle_since = now if self.idle_since is None else self.idle_since
        if now - self.idle_since >= c.idle_settle_s:
            old_idle = gap_k if self.idle_gap_k is None else self.idle_gap_k
            self.idle_gap_k = old_idle + (gap_k - old_idle) * weight

    def _estimate(
        self, model: SkinModel, limit_c: float, has_gap: bool, frontier: Frontier | None
    ) -> tuple[float | None, str, float | None]:
        """(tok/s, basis, g*): from the frontier, else the measured operating point; None: unknown."""
        if not has_gap or model.updates < self.config.min_model_updates:
            return None, "", None
        budget = model.gap_for(limit_c)
        idle = self.idle_gap_k
        if idle is not None and budget <= idle:
            return 0.0, "idle over the limit", budget
        measured = [self.operating] if self.operating is not None else []
        if frontier is not None:
            idle = frontier.idle_gap_k if idle is None else idle
            basis = "idle over the limit" if budget <= idle else "frontier"
            return speed_at(frontier_points(frontier) + measured, idle, budget), basis, budget
        if not measured:
            return None, "", budget
        # No idle gap measured yet (the engine never idled): 0 makes the line through the operating
        # point an upper bound of the speed, so a verdict below the floor still holds.
        return speed_at(measured, idle or 0.0, budget), "operating point", budget

    def _retry_after(self, model: SkinModel) -> float:
        """When to ask again: one skin time constant, at least the exit hold.

        Exhaustion is a steady-state verdict (the room, the case, the charger), not the heat of the
        last reply: it ends when the surroundings change, and the identified model follows such a
        change within about one skin time constant (the forgetting is slower, the skin error faster).
        """
        c = self.config
        tau = model.tau_s if math.isfinite(model.tau_s) else c.retry_max_s
        return min(max(tau, c.exit_after_s, c.retry_min_s), c.retry_max_s)


def refuses(state: CapacityState, policy: str) -> bool:
    """Whether a new generation is refused: exhausted under any policy but throughput."""
    return state == CapacityState.EXHAUSTED and policy != SERVES_WHEN_EXHAUSTED


class ThermalHeadroomExhausted(ResourceExhausted):
    """Generate refused: the phone cannot sustain the floor's decode rate under its comfort limit."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.trailers = ((REFUSAL_KEY, THERMAL_REFUSAL), (RETRY_AFTER_KEY, str(retry_after_s)))
