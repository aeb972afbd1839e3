"""The thermal controller: predicted skin temperature → PI → throttle depth → rung + pacing.

Pure: no I/O, no clock of its own (STYLE 12). `depth` is a continuous throttle depth in rungs of
the ladder: 0 = the fastest rung, k.x = rung k plus pacing for the fractional part.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from edgellm.device.governor.actuation import Actuation, GovernorPolicy


@dataclass(frozen=True)
class GovernorConfig:
    """Controller settings; the defaults are used unchanged on every phone profile."""

    policy: GovernorPolicy = GovernorPolicy.THERMAL  # off: fastest rung, no pacing; pinned: hold one
    setpoint_c: float | None = None  # None: lowest skin trip point minus margin_c, else fallback_setpoint_c
    margin_c: float = 2.0
    fallback_setpoint_c: float = 40.0
    horizon_s: float = 450.0  # skin time constant assumed by the predictor (phones: 300-600 s)
    slope_window_s: float = 30.0
    kp: float = 0.5  # rungs per °C of predicted excess
    ki: float = 0.008  # rungs per °C·s
    release_hysteresis: float = 0.35  # depth must fall this far below a rung before it is left
    min_dwell_s: float = 60.0  # shortest stay on a rung before speeding up again
    duty_span: float = 0.5  # duty cut across one rung's fractional depth (1.0 -> 0.5)
    min_duty: float = 0.2  # deepest pacing on the last rung
    duty_step: float = 0.05  # duty moves in steps of this size (fewer, clearer decisions)

    def resolve_setpoint(self, skin_trips_c: Sequence[float]) -> float:
        """The setpoint actually used: explicit, else below the phone's first skin trip, else fallback."""
        if self.setpoint_c is not None:
            return self.setpoint_c
        if skin_trips_c:
            return min(skin_trips_c) - self.margin_c
        return self.fallback_setpoint_c


@dataclass(frozen=True)
class Components:
    """The controller's internals, exposed for telemetry and tests."""

    measured_c: float
    predicted_c: float
    slope_c_per_s: float
    error_c: float
    p: float
    i: float
    depth: float


@dataclass(frozen=True)
class Decision:
    """A change of operating point and why."""

    at: float
    actuation: Actuation
    reason: str
    components: Components


class SlopeEstimator:
    """Least-squares slope of the last window_s seconds of samples."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, float]] = deque()

    def add(self, t: float, value: float) -> float:
        """Add a sample; return the slope (units per second), 0 until two samples span a second."""
        self.samples.append((t, value))
        while self.samples and t - self.samples[0][0] > self.window_s:
            self.samples.popleft()
        n = len(self.samples)
        if n < 2 or self.samples[-1][0] - self.samples[0][0] < 1.0:
            return 0.0
        mt = sum(s[0] for s in self.samples) / n
        mv = sum(s[1] for s in self.samples) / n
        var = sum((s[0] - mt) ** 2 for s in self.samples)
        return sum((s[0] - mt) * (s[1] - mv) for s in self.samples) / var if var > 0 else 0.0


class ThermalController:
    """PI on predicted skin temperature with anti-windup, driving a ladder with hysteresis and dwell."""

    def __init__(self, config: GovernorConfig, ladder: Sequence[Actuation], setpoint_c: float) -> None:
        if not ladder:
            raise ValueError("the governor needs at least one rung")
        self.config = config
        self.ladder = list(ladder)
        self.setpoint_c = setpoint_c
        self.slope = SlopeEstimator(config.slope_window_s)
        self.integral = 0.0
        self.rung = 0
        self.rung_since = -math.inf
        self.duty = 1.0
        self.last_t: float | None = None
        self.components = Components(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        self.current = self.ladder[0]

    @property
    def max_depth(self) -> float:
        """Deepest throttle: the last rung at full pacing."""
        c = self.config
        return len(self.ladder) - 1 + (1.0 - c.min_duty) / c.duty_span

    def __call__(self, skin_c: float, now: float) -> Decision | None:
        """Feed one measurement; return a Decision when the operating point changes."""
        c = self.config
        dt = 0.0 if self.last_t is None else max(now - self.last_t, 0.0)
        self.last_t = now
        slope = self.slope.add(now, skin_c)
        predicted = skin_c + c.horizon_s * slope
        error = predicted - self.setpoint_c
        p = c.kp * error
        unclamped = p + self.integral + c.ki * error * dt
        # anti-windup: integrate only while the output is not pinned against a limit in the error's direction
        if (
            (0.0 < unclamped < self.max_depth)
            or (unclamped >= self.max_depth > 0 and error < 0)
            or (unclamped <= 0 and error > 0)
        ):
            self.integral += c.ki * error * dt
        self.integral = min(max(self.integral, -c.kp * 10.0), self.max_depth)
        depth = min(max(p + self.integral, 0.0), self.max_depth)
        self.components = Components(skin_c, predicted, slope, error, p, self.integral, depth)
        return self._select(depth, now)

    def _select(self, depth: float, now: float) -> Decision | None:
        c = self.config
        last = len(self.ladder) - 1
        rung = self.rung
        target = min(int(depth), last)
        reason = ""
        if target > rung:  # hotter: throttle at once
            rung, reason = target, "throttle"
        elif depth < rung - c.release_hysteresis and now - self.rung_since >= c.min_dwell_s:
            rung, reason = max(target, rung - 1), "release"
        if rung != self.rung:
            self.rung, self.rung_since = rung, now
        frac = max(depth - rung, 0.0)
        raw = max(1.0 - frac * c.duty_span, c.min_duty) if rung == last or frac < 1 else 1.0
        duty = min(1.0, max(c.min_duty, round(raw / c.duty_step) * c.duty_step))
        if not reason and abs(raw - self.duty) < c.duty_step:  # hysteresis on pacing too
            duty = self.duty
        if not reason and duty == self.duty:
            return None
        reason = reason or ("pace_up" if duty < self.duty else "pace_down")
        self.duty = duty
        self.current = replace(self.ladder[rung], duty=duty)
        comp = self.components
        why = (
            f"{reason}: skin {comp.measured_c:.1f} °C, predicted {comp.predicted_c:.1f} °C "
            f"vs setpoint {self.setpoint_c:.1f} °C, depth {comp.depth:.2f}"
        )
        return Decision(now, self.current, why, comp)
