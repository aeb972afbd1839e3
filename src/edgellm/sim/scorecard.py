"""One row of the acceptance table: the governor against the oracle (and unmanaged) on one phone.

Two policies are scored (docs/governor.md, "Policies"): `comfort` (the default) against the oracle
— ≥ 0.9× its tok/s, no firmware throttling, the skin under the first trip; on the tuning and
held-out sets also at most 0.5 °C over the comfort limit and a steady-state ripple ≤ 15% —, and
`throughput` against unmanaged: ≥ 1.0× its tok/s, firmware throttling allowed and reported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from edgellm.device.governor.actuation import ThermalPolicy
from edgellm.device.governor.controller import GovernorConfig
from edgellm.sim.oracle import oracle
from edgellm.sim.profile import PhoneProfile
from edgellm.sim.simulate import SimResult, simulate

RATIO_BAR = 0.9  # governor mean tok/s ≥ 0.9 × the oracle's
SKIN_SLACK_C = 0.5  # skin never above the comfort limit + 0.5 °C
RIPPLE_BAR = 0.15  # steady-state tok/s varies by ≤ 15%
THROUGHPUT_BAR = 1.0  # throughput policy: mean tok/s ≥ 1.0 × unmanaged


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
    idle_skin_c: float = 0.0  # where the skin sits with the screen on and nothing decoding
    first_trip_c: float = 0.0  # the phone's first skin trip (readable or not)
    over_trip_c: float = 0.0  # peak skin − the first skin trip (the bar: below 0)
    throughput: Throughput | None = field(default=None)

    @property
    def over_limit_c(self) -> float:
        """Peak skin over the comfort limit, or over the idle skin where that is above the limit."""
        return round(self.peak_skin_c - max(self.comfort_c, self.idle_skin_c), 2)

    @property
    def comfort_passed(self) -> bool:
        """The comfort policy's bars on every set: oracle ratio, no throttling, skin under the first trip."""
        return self.ratio >= RATIO_BAR and self.throttled_s == 0 and self.over_trip_c < 0

    @property
    def passed(self) -> bool:
        """Every bar of the tuning and held-out sets: the comfort bars, comfort + 0.5 °C, ripple."""
        return self.comfort_passed and self.over_comfort_c <= SKIN_SLACK_C and self.ripple <= RIPPLE_BAR

    def row(self) -> dict[str, object]:
        """JSON-friendly dict with the pass flags (the throughput run's figures prefixed throughput_)."""
        row: dict[str, object] = {k: v for k, v in asdict(self).items() if k != "throughput"}
        if self.throughput is not None:
            row |= {f"throughput_{k}": v for k, v in asdict(self.throughput).items()}
            row["throughput_passed"] = self.throughput.passed
        return {**row, "over_limit_c": self.over_limit_c, "passed": self.passed}


@dataclass(frozen=True)
class Throughput:
    """The throughput policy's run on one phone, against unmanaged."""

    tps: float
    unmanaged_tps: float
    ratio: float  # throughput / unmanaged mean tok/s (the bar: ≥ 1.0)
    throttled_s: float  # firmware throttling under the throughput policy (allowed, reported)
    unmanaged_throttled_s: float
    over_trip_c: float
    ripple: float

    @property
    def passed(self) -> bool:
        """The throughput bar."""
        return self.ratio >= THROUGHPUT_BAR


def throughput_score(
    profile: PhoneProfile,
    minutes: float,
    config: GovernorConfig | None = None,
    off: SimResult | None = None,
) -> Throughput:
    """The throughput policy against unmanaged (off: its run, when already simulated) on one phone."""
    cfg = replace(config or GovernorConfig(), thermal_policy=ThermalPolicy.THROUGHPUT)
    run = simulate(profile, minutes, governor=True, config=cfg)
    off = off or simulate(profile, minutes, governor=False, config=cfg)
    return Throughput(
        tps=round(run.mean_tokens_per_second, 3),
        unmanaged_tps=round(off.mean_tokens_per_second, 3),
        ratio=_ratio(run.mean_tokens_per_second, off.mean_tokens_per_second),
        throttled_s=round(run.throttled_seconds, 1),
        unmanaged_throttled_s=round(off.throttled_seconds, 1),
        over_trip_c=round(run.peak_skin_c - first_trip_c(profile), 2),
        ripple=round(run.ripple if run.ripple is not None else 0.0, 4),
    )


def first_trip_c(profile: PhoneProfile) -> float:
    """The phone's first skin trip, whether or not the app can read it."""
    return min(profile.firmware.skin_trips_c())


def score(
    profile: PhoneProfile,
    minutes: float = 30.0,
    config: GovernorConfig | None = None,
    unmanaged: bool = False,
    throughput: bool = False,
) -> tuple[Score, SimResult]:
    """Run the governor, the oracle (and optionally unmanaged, and the throughput policy) on one phone."""
    run = simulate(profile, minutes, governor=True, config=config)
    orc = oracle(profile, minutes, config)
    off = simulate(profile, minutes, governor=False, config=config) if unmanaged or throughput else None
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
            ratio=_ratio(run.mean_tokens_per_second, orc.mean_tokens_per_second),
            throttled_s=round(run.throttled_seconds, 1),
            peak_skin_c=round(run.peak_skin_c, 2),
            over_comfort_c=round(run.peak_skin_c - comfort, 2),
            ripple=round(run.ripple if run.ripple is not None else 0.0, 4),
            ripple_from_10min=round(run.ripple_from_10min if run.ripple_from_10min is not None else 0.0, 4),
            decay_10min=round(run.decay_10min if run.decay_10min is not None else 0.0, 4),
            unmanaged_tps=None if off is None else round(off.mean_tokens_per_second, 3),
            unmanaged_peak_skin_c=None if off is None else round(off.peak_skin_c, 2),
            oracle_actuation=orc.actuation.describe(),
            idle_skin_c=round(profile.idle_skin_c, 2),
            first_trip_c=round(first_trip_c(profile), 2),
            over_trip_c=round(run.peak_skin_c - first_trip_c(profile), 2),
            throughput=throughput_score(profile, minutes, config, off) if throughput else None,
        ),
        run,
    )


def _ratio(tps: float, reference_tps: float) -> float:
    """tps over the reference's, to 3 places (inf when the reference made no tokens)."""
    return round(tps / reference_tps, 3) if reference_tps > 0 else float("inf")
