"""Measure each rung on this phone at start: its decode speed and the die-skin gap it settles at.

While the phone is still cool (skin at least `margin_c` under the aim) the governor holds each rung
for `hold_s` seconds of decoding, coolest first (so the first minute is never a sprint). The die
settles in 5-15 s; the steady gap is the asymptote of g(t) = g_ss + A·exp(−t/τ) fitted over the
hold (a small grid over τ, linear least squares for g_ss and A). Pure: readings and times in, a
Frontier out (STYLE 12).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import replace

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
        revised: bool = False,
        lead_s: float = 30.0,
        paced_late_mean: bool = False,
        resumed_min_fit_s: float | None = None,
    ) -> None:
        # a resumed hold cut short by the skin's lookahead keeps a partial fit this long (None: min_fit_s, the
        # old rule); the controller passes GovernorConfig.resumed_min_fit_s (14 s since issue 30's tenth pass)
        self.resumed_min_fit_s = min_fit_s if resumed_min_fit_s is None else resumed_min_fit_s
        self.paced_late_mean = paced_late_mean  # a paced hold's gap: its second half's mean (_settled)
        self.revised = revised  # the probe revision (GovernorConfig.revised_probe)
        self.lead_s = lead_s  # a resumed probe stops where the skin will be this far ahead
        self.skins: deque[tuple[float, float]] = deque()  # (time, skin) over the last 10 s
        self.paced: tuple[float, float] | None = None  # (duty, idle gap) while measuring at the aim
        self.paced_tps = 0.0  # the decode rate in force when paced probing began
        self.matched: tuple[int, float] | None = None  # (step, duty) matched to that rate
        self.paced_slack_c = 0.3
        self.gap_in_force_k: float | None = None  # the gap the loop held when a settled paced probe began
        self.idle_fraction, self.speed_s = idle_fraction, speed_s
        self.headroom_share, self.min_fit_s = headroom_share, min_fit_s
        self.start_skin_c: float | None = None
        self.plan: list[Actuation] = list(reversed(ladder))
        self.hold_s, self.margin_c = hold_s, margin_c
        self.step = 0
        self.held = 0.0
        self.samples: list[tuple[float, float, float]] = []  # (decode time, gap, tokens/s)
        self.results: list[tuple[Actuation, float, float]] = []
        self.stopped = self.resumed = False
        self.last_t: float | None = None

    @property
    def done(self) -> bool:
        """Whether probing is over (all held, or stopped because the skin got near the aim)."""
        return self.stopped or self.step >= len(self.plan)

    @property
    def current(self) -> Actuation:
        """What to run now (paced when measuring at the aim)."""
        act = self.plan[min(self.step, len(self.plan) - 1)]
        return act if self.paced is None else replace(act, duty=round(self._duty(), 4))

    def _duty(self) -> float:
        """The paced duty of the rung held now: the start duty until its speed is known."""
        assert self.paced is not None
        return self.matched[1] if self.matched is not None and self.matched[0] == self.step else self.paced[0]

    def _match_speed(self) -> bool:
        """After 2 s paced at the start duty: re-pace this rung to the decode rate in force.

        At equal tok/s a more efficient rung runs cooler, so the hold stays near the heat the skin
        holds (at the same duty a hot rung's gap was 2.4× the paced little cores' on a tuning phone,
        and the skin overshot). Returns whether the hold restarts.
        """
        if self.matched is not None and self.matched[0] == self.step:
            return False
        tps = [x[2] for x in self.samples if x[0] >= 1.0]
        if self.held < 2.0 or not tps or self.paced is None:
            return False
        full = sum(tps) / len(tps)  # already per unit duty
        self.matched = (self.step, min(max(self.paced_tps / full, 0.05), 1.0))
        self.held, self.samples = 0.0, []
        return True

    def pace(
        self, duty: float, idle_gap_k: float, tokens_per_second: float, gap_in_force_k: float | None = None
    ) -> None:
        """Measure the rungs not yet measured at this duty, with the skin at the aim.

        On a phone with little headroom the start-up probe stops after the coolest rung or two (or
        never starts: the phone is already at its aim), and the efficient point may be a hotter rung
        paced (a tuning phone: middle-half at duty 0.19 against little at 0.12). Paced at the duty in
        force, a rung's heat stays near what the skin holds; its full-duty point follows from
        g(d) = idle + d·(g(1) − idle) and tok/s(d) = d·tok/s(1).
        """
        self.paced, self.paced_tps, self.matched = (duty, idle_gap_k), tokens_per_second, None
        self.gap_in_force_k = gap_in_force_k  # set: a rung hotter than this at the matched rate is left
        self.resume()

    def add(
        self,
        now: float,
        skin_c: float,
        aim_c: float,
        gap_k: float | None,
        tokens_per_second: float,
    ) -> None:
        """One reading while probing; the probe clock only runs while the engine decodes.

        Probing stops when the skin nears the aim; a rung that after `speed_s` is no faster than a
        cooler one is skipped without waiting for its gap (it is dominated: the ladder runs cool to
        hot; revised: only by one as fast and no hotter). gap_k None (revised: after a prefill burst):
        the clock runs, the reading stays out of the fit. Stopping on the skin model's sustainable
        gap instead was tried and dropped: with minutes of data the model is still the prior, which
        stopped a phone with a 2.6 K/W hotspot after its first rung (0.53× the oracle).
        """
        dt = 0.0 if self.last_t is None else min(max(now - self.last_t, 0.0), 10.0)
        self.last_t = now
        if self.done:
            return
        if self.start_skin_c is None:
            self.start_skin_c = skin_c
        self.skins.append((now, skin_c))
        while now - self.skins[0][0] > 10.0:
            self.skins.popleft()
        if self._out_of_room(skin_c, aim_c, self.start_skin_c):
            # no room left for hotter rungs (on a phone with 5 K of headroom, probing them all used 3 K
            # and cost minutes at a crawl afterwards): keep what was measured, a long-enough partial too
            self._stop()
            return
        if tokens_per_second <= 0:
            return  # idle: nothing to measure
        self.held += dt
        if self._record(gap_k, tokens_per_second):
            return
        if self._dominated(dt) or self._over_force(gap_k):
            self.step += 1  # no faster than a cooler rung: dominated, move on
            self.held, self.samples = 0.0, []
            return
        if self.held >= self.hold_s:
            self._finish()

    def _record(self, gap_k: float | None, tokens_per_second: float) -> bool:
        """Keep one reading (at full duty when paced); return whether the hold restarts (rate matched)."""
        if self.paced is not None:  # the full-duty speed; the gap stays as read until the fit (_gaps)
            tokens_per_second /= self._duty()
            if gap_k is not None and gap_k < self.paced[1]:  # decoding never runs cooler than idle
                self.paced = (self.paced[0], gap_k)
        if gap_k is not None:  # None: the die is off its steady gap (a prefill burst), time still counts
            self.samples.append((self.held, gap_k, tokens_per_second))
        return self.paced is not None and self._match_speed()

    def _stop(self) -> None:
        """Out of room: keep a long-enough partial hold; a resumed probe that got none gives the rung up.

        Resumed again a minute later, the same rung stopped the same way every few minutes (a burst of
        the hot rung each time: ripple 0.36 on a tuning phone).
        """
        resumed = self.resumed and self.revised and self.paced is None
        if self.held >= (self.resumed_min_fit_s if resumed else self.min_fit_s):
            self._finish()
        elif self.resumed and self.revised:
            self.step += 1
        self.stopped = True

    def _out_of_room(self, skin_c: float, aim_c: float, start_skin_c: float) -> bool:
        """Whether the skin is near the aim, or probing used its share of the headroom it started with."""
        if self.paced is not None and self.gap_in_force_k is not None:  # under the aim: up to it, ahead
            return self._ahead(skin_c) > aim_c
        if self.paced is not None:  # measuring at the aim: a few tenths over it ends the hold
            return skin_c > max(aim_c, start_skin_c) + self.paced_slack_c
        if self.resumed and self.revised:  # a hotter rung with heat to spare: up to the margin's half
            # where the skin is heading, not where it is: the hottest rung heats the skin 0.12 °C/s and
            # it kept rising 1.4 °C for two minutes after the stop (gen-3194: +0.68 °C over comfort)
            return self._ahead(skin_c) > aim_c - self.margin_c / 2
        budget = self.headroom_share * (aim_c - start_skin_c)
        return skin_c > aim_c - self.margin_c or skin_c - start_skin_c > budget

    def _ahead(self, skin_c: float) -> float:
        """The skin lead_s ahead on its rise over the last 10 s (never below the reading)."""
        (t0, s0), (t1, _) = self.skins[0], self.skins[-1]
        slope = (skin_c - s0) / (t1 - t0) if t1 - t0 >= 5.0 else 0.0
        return skin_c + max(slope, 0.0) * self.lead_s

    def _dominated(self, dt: float) -> bool:
        """Just past speed_s on this rung: whether it is no faster than a cooler rung already measured."""
        if not self.results or not self.speed_s <= self.held < self.speed_s + dt:
            return False
        if self._hotter_at_rate():
            return True
        speed = [x[2] for x in self.samples if x[0] >= 3.0]
        if not speed:
            return False
        tps = sum(speed) / len(speed)
        if not self.revised:
            return tps <= 1.03 * max(r[2] for r in self.results)
        # dominated only by a measured rung as fast and no hotter: the built order is not always cool
        # to hot (a single mid core beside four little ones: as fast, less heat; a tuning phone whose
        # oracle paces it was left on the little cores, 0.83×)
        gap = settled_gap([x[0] for x in self.samples], self._gaps())
        return any(r[2] * 1.03 >= tps and r[1] <= gap for r in self.results)

    def _over_force(self, gap_k: float | None) -> bool:
        """A settled paced probe, rate matched: a reading already 10% over the gap in force ends the hold.

        The die rises from near the gap in force toward the rung's own: a reading over it says the
        rung is hotter at this rate without waiting speed_s (each such hold pushed the skin at its aim
        up to 0.5 °C over the comfort limit on the wide pool).
        """
        if gap_k is None or self.gap_in_force_k is None or not self._rate_matched:
            return False
        return self.held >= 3.0 and gap_k > 1.1 * self.gap_in_force_k

    @property
    def _rate_matched(self) -> bool:
        """Whether the rung held now runs at the duty matched to the decode rate in force."""
        return self.matched is not None and self.matched[0] == self.step

    def _hotter_at_rate(self) -> bool:
        """A settled paced probe, rate matched: whether this rung runs hotter than the gap in force.

        At the same decode rate a hotter gap is more power for the same tokens: no better than where
        the loop was, and holding it 40 s pushes the skin (the fastest rung matched 2.3x the gap).
        """
        if self.gap_in_force_k is None or not self._rate_matched:
            return False
        raw = [x[1] for x in self.samples]
        return len(raw) >= 4 and settled_gap([x[0] for x in self.samples], raw) > self.gap_in_force_k

    def _gaps(self) -> list[float]:
        """The hold's gaps; paced: each one's full-duty gap, g(1) = idle + (g(d) − idle)/d.

        The idle gap is the learnt one unless a paced reading sat under it (then that reading, _record):
        decoding never runs cooler than idle. A learnt idle of 2.25 K against paced readings of 1.9 K
        put middle-half's full-duty gap at 1.18 K, under idle, and the frontier could not be built:
        the governor fell back to the ladder for good (lowheadroom-4170 with the paced probe allowed
        under the aim, a variant not kept: 0.72× without this bound, over 0.9× with it).
        """
        gaps = [x[1] for x in self.samples]
        if self.paced is None:
            return gaps
        duty, idle = self._duty(), self.paced[1]
        return [idle + (g - idle) / duty for g in gaps]

    def _settled(self) -> float:
        """The hold's settled full-duty gap: the first-order asymptote, or paced, its second half's mean.

        Paced, a reading's error is multiplied by 1/duty (duty 0.07-0.4), and the asymptote's free time
        constant made a 40 s fit of 0.1 °C readings scatter by 0.03-0.04 K (sd, simulated on the small
        steps a rate-matched hold starts with) against 0.018 K for the mean of its last 20 s, whose
        transient bias is 0.01 K there: rungs a fifth apart in efficiency swapped on the hull
        (lowheadroom-2032: middle-half@70% read 1.75 K at full duty, truly 1.92, and replaced little@70%:
        0.887x; -2069: 3.10 K, truly 2.29, at duty 0.11).
        """
        times, gaps = [s[0] for s in self.samples], self._gaps()
        if self.paced is None or not self.paced_late_mean:
            return settled_gap(times, gaps)
        late = [g for t, g in zip(times, gaps, strict=True) if t >= times[-1] / 2] or gaps
        return sum(late) / len(late)

    def _finish(self) -> None:
        if self.samples:  # none: every reading of the hold fell after a prefill burst (not measured)
            gap = self._settled()
            late = [s[2] for s in self.samples if s[0] >= min(self.hold_s, self.held) / 2] or [
                s[2] for s in self.samples
            ]
            # the rung at full duty: the point is its full-duty (gap, speed); the paced actuation held
            # here once became a hull rung, and the frontier's top then ran paced (a tuning phone
            # stuck at duty 0.24 of its best rung with the skin 1.1 °C under the limit: 0.44x)
            rung = self.plan[min(self.step, len(self.plan) - 1)]
            self.results.append((rung, gap, sum(late) / len(late)))
        self.step += 1
        self.held, self.samples = 0.0, []

    @property
    def remaining(self) -> int:
        """Rungs not yet measured (hotter than every measured one)."""
        return max(len(self.plan) - self.step, 0)

    def resume(self) -> None:
        """Measure the next hotter rung after all: the governor runs at the top of what it measured
        and the skin model says there is heat to spare (probing had stopped on the headroom rule)."""
        if not self.remaining:
            self.paced = None
        else:
            self.stopped = False
            self.start_skin_c = None  # a fresh headroom budget from where the skin is now
            self.held, self.samples = 0.0, []
            self.skins.clear()
            # the probe clock restarts: a stale last reading counted the minutes on the frontier as
            # 10 s held, and the rung was judged dominated on the previous rung's speed (a tuning phone)
            if self.revised:
                self.last_t = None
            self.resumed = True

    def frontier(self, min_duty: float, idle_gap_k: float | None = None) -> Frontier | None:
        """The measured frontier over the rungs measured so far, or None when none was."""
        if not self.results:
            return None
        # The idle gap (static power) is not probed: a half-duty probe after the hot rungs settles
        # from 25 K down to 3 K and its fit was off by 3 K on a tuning phone, which dropped the best
        # rung from the hull. Half the coolest rung's gap is a cautious guess (sd8gen3 0.59, the
        # tuning phones 0.4-0.6): guessing high only makes pacing look worse than mixing rungs.
        idle = self.idle_fraction * self.results[0][1] if idle_gap_k is None else idle_gap_k
        points = [Point(act, gap, tps) for act, gap, tps in self.results]
        try:
            return Frontier(points, idle, min_duty)
        except ValueError:
            return None
