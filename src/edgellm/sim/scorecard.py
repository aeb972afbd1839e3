"""One row of the acceptance table: the governor against the oracle (and unmanaged) on one phone."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from edgellm.device.governor.controller import GovernorConfig
from edgellm.sim.oracle import oracle
from edgellm.sim.profile import PhoneProfile
from edgellm.sim.simulate import SimResult, simulate

RATIO_BAR = 0.9  # governor mean tok/s ≥ 0.9 × the oracle's
SKIN_SLACK_C = 0.5  # skin never above the comfort limit + 0.5 °C
RIPPLE_BAR = 0.15  # steady-state tok/s varies by ≤ 15%


@dataclass(frozen=True)
class Score:
    """The governor's figures on one phone and whether each bar is met."""

    profile: str
    ambient_c: float
    clusters: int
    trips_readable: bool
    comfort_c: float
    governor_tps: float
    oracle_tps: float
    ratio: float
    throttled_s: float
    peak_skin_c: float
    over_comfort_c: float  # peak skin − comfort limit
    ripple: float  # minutes 15-30: the bar
    ripple_from_10min: float
    decay_10min: float
    unmanaged_tps: float | None
    unmanaged_peak_skin_c: float | None  # the firmware holds an unmanaged phone (no 60 °C skins)
    oracle_actuation: str

    @property
    def passed(self) -> bool:
        """Every held-out bar at once."""
        return (
            self.ratio >= RATIO_BAR
            and self.throttled_s == 0
            and self.over_comfort_c <= SKIN_SLACK_C
            and self.ripple <= RIPPLE_BAR
        )

    def row(self) -> dict[str, object]:
        """JSON-friendly dict with a pass flag."""
        return {**asdict(self), "passed": self.passed}


def score(
    profile: PhoneProfile,
    minutes: float = 30.0,
    config: GovernorConfig | None = None,
    unmanaged: bool = False,
) -> tuple[Score, SimResult]:
    """Run the governor, the oracle (and optionally unmanaged) on one phone."""
    run = simulate(profile, minutes, governor=True, config=config)
    orc = oracle(profile, minutes, config)
    off = simulate(profile, minutes, governor=False, config=config) if unmanaged else None
    comfort = orc.comfort_c
    return (
        Score(
            profile=profile.name,
            ambient_c=round(profile.ambient_c, 1),
            clusters=len(profile.clusters),
            trips_readable=profile.trip_points_readable,
            comfort_c=round(comfort, 2),
            governor_tps=round(run.mean_tokens_per_second, 3),
            oracle_tps=round(orc.mean_tokens_per_second, 3),
            ratio=round(run.mean_tokens_per_second / orc.mean_tokens_per_second, 3)
            if orc.mean_tokens_per_second > 0
            else float("inf"),
            throttled_s=round(run.throttled_seconds, 1),
            peak_skin_c=round(run.peak_skin_c, 2),
            over_comfort_c=round(run.peak_skin_c - comfort, 2),
            ripple=round(run.ripple if run.ripple is not None else 0.0, 4),
            ripple_from_10min=round(run.ripple_from_10min if run.ripple_from_10min is not None else 0.0, 4),
            decay_10min=round(run.decay_10min if run.decay_10min is not None else 0.0, 4),
            unmanaged_tps=None if off is None else round(off.mean_tokens_per_second, 3),
            unmanaged_peak_skin_c=None if off is None else round(off.peak_skin_c, 2),
            oracle_actuation=orc.actuation.describe(),
        ),
        run,
    )
