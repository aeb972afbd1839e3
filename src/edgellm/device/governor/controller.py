"""The thermal controller: identified skin model → target die-skin gap → a position on the frontier.

Pure: no I/O, no clock of its own (STYLE 12). Two loops (docs/governor.md):

- outer (skin, minutes): the identified model (governor/identify.py) gives the die-skin gap that
  holds the skin at the comfort limit, pulled down hard while the skin is above it;
- inner (gap, seconds): the die settles in seconds, so the gap is a power meter; an integral turns
  the gap error into a gap command and the measured frontier (governor/frontier.py, built by the
  start-up probe, governor/probe.py) turns the command into rung shares and pacing.

Before the probe has a frontier it walks the ladder in its built order (governor/path.py); without a
die sensor it falls back to a PI on the skin extrapolated one time constant ahead.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from edgellm.device.governor.actuation import Actuation, ThermalPolicy
from edgellm.device.governor.frontier import Frontier
from edgellm.device.governor.identify import SkinIdentifier
from edgellm.device.governor.path import LadderPath
from edgellm.device.governor.probe import Prober
from edgellm.device.governor.settings import GovernorConfig

__all__ = ["Components", "Decision", "GovernorConfig", "SlopeEstimator", "ThermalController"]


@dataclass(frozen=True)
class Components:
    """The controller's internals, exposed for telemetry and tests."""

    measured_c: float
    predicted_c: float  # where the skin settles at the present gap (model), or the extrapolation
    slope_c_per_s: float
    error_c: float  # predicted − aim
    p: float
    i: float
    depth: float  # position on the ladder path
    gap_k: float = 0.0
    target_gap_k: float = 0.0
    tau_s: float = 0.0
    ambient_c: float = 0.0
    mode: str = "frontier"  # probe | frontier | ladder | skin-only | throughput


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
    """Feed it (skin, time[, die, headroom, tokens/s]); returns a Decision when the actuation changes."""

    def __init__(self, config: GovernorConfig, ladder: Sequence[Actuation], setpoint_c: float) -> None:
        self.config = c = config
        self.path = LadderPath(ladder, c.duty_halving, c.min_duty, c.quantum)
        self.ladder = self.path.ladder
        self.setpoint_c = setpoint_c  # the comfort limit
        self.identifier = SkinIdentifier(c.identify)
        self.throughput = c.thermal_policy is ThermalPolicy.THROUGHPUT
        probe = c.probe and not self.throughput
        self.prober: Prober | None = (
            Prober(
                ladder,
                c.probe_hold_s,
                c.probe_margin_c,
                revised=c.revised_probe,
                lead_s=c.probe_lead_s,
                paced_late_mean=c.paced_probe_late_mean,
                resumed_min_fit_s=c.resumed_min_fit_s,
            )
            if probe
            else None
        )
        self.frontier: Frontier | None = None
        self.slope = SlopeEstimator(c.slope_window_s)
        start = 0 if self.throughput else c.start_rung if c.start_rung >= 0 else self.path.last
        self.position = self.applied = float(min(start, self.path.last))
        self.gap_integral = 0.0  # frontier mode
        self.idle_hint_k: float | None = None  # the die-skin gap at the first reading (idle)
        self.pace_since: float | None = None
        self.steady_since: float | None = None  # the gap loop on its target since (settled_probe)
        self.started_at: float | None = None
        self.decode_rate = 0.0  # EMA of the decode rate while decoding
        self.clean_gap: float | None = None  # the last gap read off a prefill pulse (the skin model's)
        self.raw_gap: float | None = None  # this reading's die-skin gap (None while the die settles)
        self.command: float | None = None
        self.learn_from = -math.inf
        self.spare_since: float | None = None
        self.settle_until = -math.inf
        self.gaps: deque[float] = deque(maxlen=c.gap_median_n)
        self.skin_ema: float | None = None
        self.integral = 0.0  # skin-only fallback
        self.last_t: float | None = None
        self.components = Components(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, self.position, mode="ladder")
        self.current = self.path.actuation(self.position)

    @property
    def max_depth(self) -> float:
        """Deepest throttle on the current path."""
        return self.frontier.max_position if self.frontier is not None else self.path.max_position

    @property
    def rung(self) -> int:
        """The rung in force (its blend partner is the next one)."""
        return self.current.rung

    @property
    def probing(self) -> bool:
        """Whether the start-up measurement of the rungs is under way."""
        return self.prober is not None and not self.prober.done

    def __call__(
        self,
        skin_c: float,
        now: float,
        die_c: float | None = None,
        headroom: float | None = None,
        tokens_per_second: float | None = None,
        prefill_age_s: float | None = None,
    ) -> Decision | None:
        """Feed one measurement; return a Decision when the operating point changes.

        die_c: the hottest CPU zone; headroom: AThermal's forecast (1.0 = SEVERE); tokens_per_second:
        the decode rate over the last period; prefill_age_s: seconds since the last prefill burst.
        """
        c = self.config
        aim = self._aim(headroom)
        dt = self._elapsed(now, skin_c, aim)
        slope = self.slope.add(now, skin_c)
        if die_c is None:
            self.prober = None
            self._skin_only_step(skin_c, aim, slope, dt)
            return None if self.throughput else self._select(now)
        learn = not self.probing and now >= self.learn_from
        settling = self._settling(now, prefill_age_s)
        model_die_c = skin_c + self._model_gap(die_c - skin_c, prefill_age_s)
        model = self.identifier.add(now, skin_c, model_die_c, learn)
        goal = self._goal(skin_c, aim, dt)
        # the probe fits each rung's settling on the gap as read: the filtered gap lags a rung change
        # by ~10 s and read middle-half 4.6 K against 6.1 K on a tuning phone (prefill pulses skipped)
        self.raw_gap = None if settling else die_c - skin_c
        if self.idle_hint_k is None:  # the daemon starts idle: the first gap is the idle one
            self._first_gap(die_c - skin_c)
        gap = self._gap(die_c - skin_c, settling)
        target = max(model.gap_for(goal), c.gap_floor_k)
        if self.throughput:  # the fastest rung throughout; the model is still learnt (and shown)
            mode = "throughput"
        else:
            mode = self._step(now, skin_c, aim, gap, target, 0.0 if settling else dt, dt, tokens_per_second)
        predicted = model.steady_skin_c(gap)
        self.components = Components(
            skin_c,
            predicted,
            slope,
            predicted - aim,
            goal - aim,
            self.gap_integral,
            self.position,
            gap,
            target,
            model.tau_s,
            model.ambient_c,
            mode,
        )
        if mode == "probe":
            return self._set(self.prober.current if self.prober is not None else self.current, now, "probe")
        return None if self.throughput else self._select(now)

    def _model_gap(self, gap_k: float, prefill_age_s: float | None) -> float:
        """The gap the skin model learns from: held at its last reading off a prefill pulse.

        A CPU zone reads a hotspot over the die (K/W times the CPU's power): a prefill burst on the
        fastest cores lifts the reading at once, by several kelvin, while the heat reaching the skin
        follows the die node. In the model's windows those pulses were a gap the skin did not answer,
        so every reply pulled the gain down and the ambient up along the ridge a constant gap leaves
        free: a tuning phone (2.4 K/W hotspot, 12 tok/s, a reply every ~20 s) drifted from 23 to
        38.8 °C of effective ambient over 24 minutes and its target gap fell from 8.7 to 1.3 K with
        the skin 4 °C under the limit (ripple 0.30). The gap loop and the probe already skip the
        pulses (`_gap`, `raw_gap`); the model now does too.
        """
        pulse = prefill_age_s is not None and prefill_age_s < self.config.prefill_settle_s
        if not self.config.model_skips_prefill or not pulse or self.clean_gap is None:
            self.clean_gap = gap_k
        return self.clean_gap

    def _elapsed(self, now: float, skin_c: float, aim: float) -> float:
        """Seconds since the last reading (0 at the first, which starts deepest on a hot phone)."""
        if self.last_t is None:
            self.last_t = self.started_at = now
            if skin_c >= aim and not self.throughput:
                self._start_hot()
            return 0.0
        dt = min(max(now - self.last_t, 0.0), 10.0)
        self.last_t = now
        return dt

    def _start_hot(self) -> None:
        """The first reading is already at the aim (a hot room, a pocket, a charger): start deepest.

        The coolest rung at full duty is a sprint on such a phone: on the low-headroom tuning set its
        first minute put the skin up to 0.49 °C over where the idle phone sat (the bar is 0.5).
        From the deepest position the loop releases as far as the heat allows.
        """
        if self.prober is not None and self.config.revised_probe:  # no headroom now: later, paced
            self.prober.stopped = True
        else:
            self.prober = None  # no headroom to measure the rungs with
        self.position = self.path.max_position
        self.applied = -1.0  # the next selection emits the move

    def _first_gap(self, gap_k: float) -> None:
        """The first reading's gap: the idle one; a warm start may probe on half its headroom.

        A phone that starts warm (a hot room, a case: the static power alone holds the die over the
        skin) has little headroom, and a quarter of it ended the start-up probe after the coolest rung
        (its 40 s at full duty alone used it): the hotter, often more efficient rungs went unmeasured
        (a single mid core that the oracle paces, on 7 low-headroom tuning phones: 0.70-0.89x).
        """
        self.idle_hint_k = gap_k
        warm = gap_k >= self.config.identify.steady_start_min_gap_k
        if warm and self.prober is not None:
            self.prober.headroom_share = self.config.warm_probe_headroom_share

    def _aim(self, headroom: float | None) -> float:
        """The skin temperature to hold: under the comfort limit, lower when the OS forecasts throttling."""
        c = self.config
        aim = self.setpoint_c - c.aim_below_c
        if headroom is not None and math.isfinite(headroom) and headroom > c.headroom_limit:
            aim -= c.k_headroom_c * (headroom - c.headroom_limit)  # the OS forecasts throttling: back off
        return aim

    def _goal(self, skin_c: float, aim: float, dt: float) -> float:
        """Where the model should settle the skin: the aim, pulled down while the filtered skin is over."""
        c = self.config
        if self.skin_ema is None:
            self.skin_ema = skin_c
        self.skin_ema += (skin_c - self.skin_ema) * min(dt / c.skin_filter_s, 1.0)
        excess = self.skin_ema - aim
        return aim - (c.kp_over_c if excess > 0 else c.kp_under_c) * excess

    def _settling(self, now: float, prefill_age_s: float | None) -> bool:
        """Whether the die is still off its steady gap (after a prefill burst, or after probing)."""
        after_prefill = prefill_age_s is not None and prefill_age_s < self.config.prefill_settle_s
        return after_prefill or now < self.settle_until

    def _gap(self, gap_now: float, settling: bool) -> float:
        """The die-skin gap the loops use: an interquartile mean of the last gaps, floored.

        A prefill burst (fastest cores, ~0.3 s per request) heats the die for ~10 s, which the integral
        followed into a 30 s dip of decode speed once per reply (ripple 0.37 on a hot tuning phone); a
        median kept the sensors' 0.1 °C steps, and on a hot phone 0.1 K of gap is a third of the budget.
        """
        if not settling or not self.gaps:
            self.gaps.append(gap_now)
        ordered = sorted(self.gaps)
        cut = len(ordered) // 4  # interquartile mean: a prefill's die pulse lasts ~10 samples
        core = ordered[cut : len(ordered) - cut] if cut else ordered
        return max(sum(core) / len(core), self.config.gap_floor_k)

    def _step(
        self,
        now: float,
        skin_c: float,
        aim: float,
        gap: float,
        target: float,
        gap_dt: float,
        dt: float,
        tokens_per_second: float | None,
    ) -> str:
        """Move the position by the loop in charge (probe, frontier or ladder); return its name.

        gap_dt: the frontier integral's time step (0 while the die settles).
        """
        if self.prober is not None and tokens_per_second is None:
            self.prober = None  # nothing to rank the rungs by
        if tokens_per_second:  # the decode rate in force (a paced probe matches it)
            self.decode_rate += (tokens_per_second - self.decode_rate) * min(dt / 30.0, 1.0)
        if self.prober is not None and not self.prober.done:
            return self._probe_step(self.prober, now, skin_c, aim, gap, target, tokens_per_second or 0.0)
        settled = abs(gap - target) <= self.config.settled_tolerance * target
        self._maybe_pace(self._pace_skin(skin_c), aim, now, settled)
        self._maybe_pace_settled(skin_c, aim, gap, target, now)
        if self.prober is not None and not self.prober.done:
            return "probe"
        if self.frontier is not None:
            self._frontier_step(gap, target, gap_dt)
            self._maybe_extend(skin_c, aim, target, gap, now)
            return "frontier"
        step = min(max(math.log(gap / target), -1.0), 1.0)
        self.position = min(max(self.position + self.config.k_gap * step * dt, 0.0), self.path.max_position)
        return "ladder"

    def _probe_step(
        self, prober: Prober, now: float, skin_c: float, aim: float, gap: float, target: float, tps: float
    ) -> str:
        """One probing reading; when probing ends, move onto the measured frontier (if one was built)."""
        c = self.config
        if not c.revised_probe:
            prober.add(now, skin_c, aim, gap, tps)
        else:
            prober.add(now, skin_c, aim, self.raw_gap, tps)
        if not prober.done:
            return "probe"
        idle = self.frontier.idle_gap_k if self.frontier is not None else None
        self.frontier = prober.frontier(c.min_duty, idle if prober.paced is None else prober.paced[1])
        self.learn_from = now + c.learn_after_probe_s
        # the die is still at the last (hottest) probe's gap: start from the model's target
        # and let the gap loop work once the die has settled on the new operating point
        self.settle_until = now + c.probe_settle_s
        self.gaps.clear()
        if self.frontier is None:
            return "probe"
        self.position = self.frontier.position(target)
        self.command = target
        self.applied = -1.0  # positions now live on the frontier: force the first selection
        return "frontier"

    def _pace_skin(self, skin_c: float) -> float:
        """The skin a paced probe's start is judged on: filtered when pace_on_filtered_skin.

        Read raw, a 0.1 °C sensor step across the 0.3 °C band restarted the 120 s count, and a phone
        whose skin crept up to its aim over minutes 4-10 never got its rungs measured (a low-headroom
        tuning phone left on its little cores: 0.70x the oracle's single mid core).
        """
        if self.config.pace_on_filtered_skin and self.skin_ema is not None:
            return self.skin_ema
        return skin_c

    def _near_aim(self, skin: float, aim: float, settled: bool) -> bool:
        """Within 0.3 °C of the aim, or settled up to pace_settled_under_c under it (off: 0).

        The second was tried for a skin that creeps up to its aim over ten minutes on the little cores
        (lowheadroom-4224, issue 30's tenth pass): it fixed that phone and slowed more than it sped up.
        """
        under_c = self.config.pace_settled_under_c
        return abs(skin - aim) <= 0.3 or (settled and aim - under_c <= skin <= aim)

    def _maybe_pace(self, skin: float, aim: float, now: float, settled: bool = False) -> None:
        """Paced at the aim for a while with rungs never measured: measure them at this duty."""
        pr, fr, cur = self.prober, self.frontier, self.current
        if pr is None or not self._pace_ready(pr, now) or not self._near_aim(skin, aim, settled):
            self.pace_since = None
            return
        coolest = fr.hull[-1].actuation.cpus if fr is not None else cur.cpus
        if cur.duty > self.config.pace_below_duty or cur.blend or cur.cpus != coolest:
            self.pace_since = None
            return
        if self.pace_since is None:
            self.pace_since = now
        elif now - self.pace_since >= self.config.pace_after_s:
            idle = fr.idle_gap_k if fr is not None else self.idle_hint_k
            pr.pace(max(cur.duty, self.config.paced_probe_min_duty), idle or 0.0, self.decode_rate)
            self.pace_since = None

    def _maybe_pace_settled(self, skin: float, aim: float, gap: float, target: float, now: float) -> None:
        """The gap loop settled, the skin a probe margin under the aim, rungs never measured: measure
        them at the decode rate in force.

        The start-up probe runs the ladder's built order and stops on its headroom share, but with
        frequency caps that order is not cool to hot: a capped larger core set can be faster *and*
        cooler than the uncapped smaller one before it (a tuning phone: middle@70% 12.2 tok/s at
        5.8 K, middle-half 11.1 at 7.2 K, probed in that order and stopped after the second). The
        governor then blends below the measured top, so the extension (`_maybe_extend`) never fires,
        and it settled at 0.84x the oracle with the skin at its limit. Held at the duty that matches
        the decode rate in force, each unmeasured rung runs near the heat the loop holds; one whose
        gap there is over the gap in force is worse at this rate and is left (probe.py). Only with the
        start-up probe's margin to the aim: nearer, the skin at the aim is the paced probe's case and
        the holds' swing lingered into the steady state (a 34.6 °C tuning phone: ripple 0.14 -> 0.20).
        """
        c, pr, fr = self.config, self.prober, self.frontier
        steady = abs(gap - target) <= c.settled_tolerance * target and skin <= aim - c.probe_margin_c
        ready = pr is not None and self._pace_ready(pr, now, c.settled_within_s)
        if not c.settled_probe or pr is None or fr is None or not ready or not steady:
            self.steady_since = None
            return
        if self.steady_since is None:
            self.steady_since = now
        elif now - self.steady_since >= c.pace_after_s:
            # each rung starts at no more than pace_below_duty until its rate is matched: the fastest
            # rung at full duty for those first seconds heated the die 10 K over the gap in force
            duty = min(self.current.duty, c.pace_below_duty)
            pr.pace(max(duty, c.paced_probe_min_duty), fr.idle_gap_k, self.decode_rate, gap_in_force_k=gap)
            self.steady_since = None

    def _pace_ready(self, pr: Prober, now: float, within_s: float | None = None) -> bool:
        """Whether a paced probe may start: revised probe, rungs unmeasured, none paced yet, early on."""
        within = self.config.pace_within_s if within_s is None else within_s
        early = self.started_at is not None and now - self.started_at <= within
        return self.config.revised_probe and pr.done and pr.remaining > 0 and pr.paced is None and early

    def _maybe_extend(self, skin: float, aim: float, target: float, gap: float, now: float) -> None:
        """At the top of the measured frontier with heat to spare for a minute: measure a hotter rung."""
        c = self.config
        fr, pr = self.frontier, self.prober
        if fr is None or pr is None or not pr.remaining or skin > aim - c.probe_margin_c:
            self.spare_since = None
            return
        top = (
            min(gap, fr.max_gap_k) if c.revised_probe else fr.max_gap_k
        )  # measured there: the probe's may be high
        if target < 1.1 * top or self.position > 0.0:
            self.spare_since = None
            return
        if self.spare_since is None:
            self.spare_since = now
        elif now - self.spare_since >= c.extend_after_s:
            pr.resume()
            self.spare_since = None

    def _frontier_step(self, gap: float, target: float, dt: float) -> None:
        """Integrate the gap error into a gap command; the measured frontier turns it into a position.

        Pure integral (no feedforward of the target through the map): the map's idle end is a guess,
        and a feedforward through it left a standing error that a slow integral then dragged on for
        minutes (ripple 0.5 on a hot tuning phone). With the map only setting the loop gain, the
        measured gap meets the target whatever the map's offset.
        """
        c = self.config
        fr = self.frontier
        assert fr is not None and self.command is not None
        error = target - gap
        self.command += c.ki_gap * error * dt
        self.command = min(max(self.command, fr.min_gap_k), fr.max_gap_k)  # no wind-up past either end
        self.gap_integral = self.command - target
        self._learn_idle(fr, gap, dt)
        self.position = fr.position(self.command)

    def _learn_idle(self, fr: Frontier, gap: float, dt: float) -> None:
        """While pacing the coolest hull rung, learn where idle really is; re-hull once it has moved."""
        c = self.config
        duty, coolest = self.current.duty, fr.hull[-1]
        elsewhere = c.revised_probe and self.current.cpus != coolest.actuation.cpus  # before a re-hull lands
        if duty >= 0.9 or self.current.blend or elsewhere:
            return
        seen = (gap - duty * coolest.gap_k) / (1.0 - duty)  # g(d) = idle + d·(g(1) − idle)
        fr.idle_gap_k += (min(max(seen, 0.0), 0.95 * coolest.gap_k) - fr.idle_gap_k) * min(
            dt / c.idle_learn_s, 1.0
        )
        if c.revised_probe and abs(fr.idle_gap_k - fr.hulled_at_k) >= c.rehull_k and fr.rehull():
            self.applied = -1.0  # the positions moved: select on the new hull

    def _skin_only_step(self, skin: float, aim: float, slope: float, dt: float) -> None:
        c = self.config
        predicted = skin + c.horizon_s * slope
        error = predicted - aim
        p = c.kp * error
        top = self.path.max_position
        unclamped = p + self.integral + c.ki * error * dt
        if (0.0 < unclamped < top) or (unclamped >= top and error < 0) or (unclamped <= 0 and error > 0):
            self.integral += (
                c.ki * error * dt
            )  # anti-windup: integrate unless pinned in the error's direction
        self.integral = min(max(self.integral, -c.kp * 10.0), top)
        self.position = min(max(p + self.integral, 0.0), top)
        self.components = Components(
            skin, predicted, slope, error, p, self.integral, self.position, mode="skin-only"
        )

    def _select(self, now: float) -> Decision | None:
        q = self.config.quantum
        if abs(self.position - self.applied) < self.config.hysteresis:  # hold until a clear step
            return None
        target = min(round(self.position / q) * q, self.max_depth)
        if target == self.applied:
            return None
        reason = "throttle" if target > self.applied else "release"
        self.applied = target
        act = self.frontier.actuation(target) if self.frontier is not None else self.path.actuation(target)
        return self._set(act, now, reason)

    def _set(self, act: Actuation, now: float, reason: str) -> Decision | None:
        if act == self.current:
            return None
        self.current = act
        comp = self.components
        why = (
            f"{reason}: skin {comp.measured_c:.1f} °C, predicted {comp.predicted_c:.1f} °C "
            f"vs setpoint {self.setpoint_c:.1f} °C, position {comp.depth:.2f} ({comp.mode})"
        )
        return Decision(now, act, why, comp)
