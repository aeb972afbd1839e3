"""The governor's settings (one frozen dataclass, passed in: STYLE 2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from edgellm.device.governor.actuation import GovernorPolicy, ThermalPolicy
from edgellm.device.governor.identify import IdentifyConfig


@dataclass(frozen=True)
class GovernorConfig:
    """Controller settings, the same on every phone: chosen on the shipped profiles and the tuning set
    with bench/tune_governor.py, never on the held-out set (edgellm/sim/generator.py)."""

    policy: GovernorPolicy = GovernorPolicy.THERMAL  # off: fastest rung, no pacing; pinned: hold one
    # comfort: hold the skin under the comfort limit; throughput: decode as unmanaged (the fastest
    # rung, no pacing) and leave the skin to the firmware (docs/governor.md, "Policies")
    thermal_policy: ThermalPolicy = ThermalPolicy.COMFORT
    setpoint_c: float | None = None  # the comfort limit; None: first skin trip − margin_c, else fallback
    margin_c: float = 1.5
    fallback_setpoint_c: float = 37.0  # below the coolest first skin trip we know of (39 °C) − margin
    aim_below_c: float = 0.0  # regulate this far under the comfort limit
    skin_filter_s: float = 30.0  # EMA of the skin for the outer loop (it moves over minutes, noise does not)
    kp_over_c: float = 3.0  # aim moves down this many K per K the skin is above the aim
    kp_under_c: float = 0.0  # ... and up this many per K below (0: no sprint while cool; the decay bar)
    k_gap: float = 0.05  # ladder mode: positions per second per unit of ln(gap / target gap)
    ki_gap: float = 0.03  # frontier mode: K of gap command per K·s of gap error (die: 5-15 s)
    probe: bool = True  # measure every rung at start (governor/probe.py) and run on the efficient frontier
    probe_hold_s: float = 40.0
    probe_margin_c: float = 1.5
    warm_probe_headroom_share: float = 0.5  # a warm start's probe may use this share of its headroom
    extend_after_s: float = 60.0  # at the frontier's top with heat to spare this long: probe a hotter rung
    # ... and a resumed hold that the skin's lookahead stops keeps its partial fit from this long (s; None:
    # the old rule, the probe's 20 s, under which the rung is given up for good). On at 14 s since issue 30's
    # tenth pass: on the wide+warm pool it lifted the warm phones whose oracle blends in a hotter rung (warm
    # worst 0.910 -> 0.921), none worse in ratio, no new miss, the 24-phone sets unchanged
    resumed_min_fit_s: float | None = 14.0
    learn_after_probe_s: float = 60.0  # the die keeps heating the skin after the hot probes: learn after
    probe_settle_s: float = 30.0  # after probing, hold the gap loop while the die leaves the hot probe
    start_rung: int = -1  # start on this rung (−1: the coolest) and release from there: no cold-start sprint
    gap_floor_k: float = 0.3
    gap_median_n: int = 21
    prefill_settle_s: float = 12.0  # after a prefill burst the die runs hot for ~10 s: hold the gap loop
    idle_learn_s: float = 300.0  # EMA horizon of the idle gap learnt while pacing
    # The probe revision of issue 30 (docs/governor.md, "Low-headroom phones"): the probe fits the
    # unfiltered gap, ranks a rung as dominated only by one as fast *and* no hotter, re-hulls on the
    # learnt idle, measures the unmeasured rungs paced at the aim, and a resumed probe restarts its
    # clock, stops on where the skin is heading, and a paced reading bounds the idle gap. On (issue
    # 30, fourth pass) with the warm start (identify.steady_start_min_gap_k, warm_probe_headroom_share,
    # pace_on_filtered_skin): on the 800-phone tuning pool 5 + 6 misses (was 5 + 21; off: 15 + 31).
    revised_probe: bool = True
    probe_lead_s: float = 30.0  # revised: a resumed probe stops where the skin will be this far ahead
    pace_after_s: float = 120.0  # paced at the aim this long with rungs unmeasured: measure them paced
    pace_within_s: float = 600.0  # ... in the first minutes only: later, a measurement is a swing
    pace_on_filtered_skin: bool = True  # ... judged on the skin_filter_s-filtered skin
    # ... or up to this far under the aim with the gap loop settled on its target (K; 0: at the aim only).
    # Off: 1.0 fixed lowheadroom-4224 and slowed more phones than it sped up (issue 30, tenth pass)
    pace_settled_under_c: float = 0.0
    pace_below_duty: float = 0.5  # ... only when pacing this deep (a hotter rung at a high duty is a sprint)
    paced_probe_min_duty: float = 0.1  # ... at no lower duty (a 0.05 duty's gap is sensor noise)
    # ... and, with the gap loop settled on its target (within this share) for pace_after_s and the skin
    # probe_margin_c under the aim, at the decode rate in force: with frequency caps the built order is
    # not cool to hot, and the start-up probe stopped before a faster, cooler capped rung (sixth pass)
    settled_probe: bool = True
    settled_tolerance: float = 0.05
    settled_within_s: float = 720.0  # ... starting in the first minutes only
    paced_probe_late_mean: bool = True  # ... a paced hold reads its last half's mean gap, not an asymptote
    # the skin model learns the gap held at its last reading off a prefill pulse (prefill_settle_s):
    # the CPU zone's hotspot made each pulse a gap the skin never answered (issue 30, fifth pass)
    model_skips_prefill: bool = True
    rehull_k: float = 0.1  # re-rank the rungs once the learnt idle gap has moved this far (K)
    duty_halving: float = 1.0  # past the last rung, the decode duty halves every this many positions
    min_duty: float = 0.05
    quantum: float = 0.05  # positions move in steps of this size
    hysteresis: float = 0.0375  # ... and only once the wanted position is this far from the applied one
    headroom_limit: float = 0.85  # AThermal headroom (1.0 = SEVERE) above which the aim comes down
    k_headroom_c: float = 20.0  # K of aim per unit of headroom above the limit
    horizon_s: float = 420.0  # skin-only fallback: extrapolation horizon (phones: 300-600 s)
    slope_window_s: float = 30.0
    kp: float = 0.5  # skin-only fallback: positions per °C of predicted excess
    ki: float = 0.008  # positions per °C·s
    identify: IdentifyConfig = field(default_factory=IdentifyConfig)

    def resolve_setpoint(self, skin_trips_c: Sequence[float]) -> float:
        """The comfort limit: explicit, else below the phone's first skin trip, else the fallback."""
        if self.setpoint_c is not None:
            return self.setpoint_c
        if skin_trips_c:
            return min(skin_trips_c) - self.margin_c
        return self.fallback_setpoint_c
