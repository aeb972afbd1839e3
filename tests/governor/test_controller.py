"""The controller with a fake clock against the virtual phone: converges, steady speed, fallbacks."""

from __future__ import annotations

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.controller import GovernorConfig, SlopeEstimator, ThermalController
from edgellm.device.governor.ladder import build_ladder
from edgellm.device.telemetry.cpu import CoreCluster
from edgellm.sim.profile import load_profile
from edgellm.sim.simulate import simulate

SD8G3 = [
    CoreCluster((0, 1), 280, 2270000),
    CoreCluster((2, 3, 4, 5, 6), 850, 3150000),
    CoreCluster((7,), 1024, 3300000),
]


def ladder() -> list[Actuation]:
    return build_ladder(SD8G3, set(range(8)), 4)


def test_ladder_goes_from_fast_to_cool_and_keeps_prefill_fast() -> None:
    rungs = ladder()
    assert [r.label for r in rungs] == ["fastest", "middle", "middle-half", "little"]
    assert rungs[0].cpus == (4, 5, 6, 7)
    assert 7 not in rungs[1].cpus
    assert all(r.prefill_cpus == rungs[0].cpus and r.threads == 4 for r in rungs)


def test_ladder_respects_allowed_cpus() -> None:
    rungs = build_ladder(SD8G3, {0, 1, 2, 3}, 2)  # big cores refused to this process
    assert all(set(r.cpus) <= {0, 1, 2, 3} for r in rungs)


def test_slope_estimator() -> None:
    est = SlopeEstimator(10.0)
    slope = 0.0
    for t in range(20):
        slope = est.add(float(t), 30.0 + 0.1 * t)
    assert abs(slope - 0.1) < 1e-9


def test_converges_to_the_comfort_limit_at_a_steady_speed() -> None:
    prof = load_profile("sd8gen3")
    result = simulate(prof, 30, governor=True)
    assert result.setpoint_c is not None
    late = [s for s in result.samples if s.t_s > 20 * 60]
    temps = [s.skin_c for s in late]
    # The identified model aims the die-skin gap at what holds the skin at the limit: the skin
    # settles just under it, with no limit cycle between rungs.
    assert result.setpoint_c - 1.0 < min(temps) and max(temps) <= result.setpoint_c + 0.5
    assert result.ripple is not None and result.ripple <= 0.15
    assert result.peak_skin_c < prof.firmware.levels[0].trip_skin_c
    assert result.throttled_seconds == 0


def test_without_a_cpu_zone_the_skin_only_fallback_still_keeps_the_firmware_off() -> None:
    prof = load_profile("sd8gen3")
    result = simulate(prof, 30, governor=True, die_sensor=False)
    assert result.throttled_seconds == 0
    assert result.peak_skin_c < prof.firmware.levels[0].trip_skin_c


def test_skin_only_anti_windup_releases_quickly_after_saturation() -> None:
    cfg = GovernorConfig()
    ctl = ThermalController(cfg, ladder(), setpoint_c=40.0)
    t = 0.0
    for _ in range(600):  # ten minutes far above the setpoint, no CPU zone: output pinned at max depth
        ctl(50.0, t)
        t += 1.0
    assert ctl.components.depth >= ctl.max_depth - 0.1 and ctl.components.mode == "skin-only"
    assert ctl.integral <= ctl.max_depth  # the integral is clamped, not wound up without bound
    start = t
    for _ in range(200):  # then cool: it must speed up within a minute, not after minutes of unwinding
        ctl(30.0, t)
        t += 1.0
        if ctl.current.rung < len(ctl.ladder) - 1:
            break
    assert ctl.current.rung < len(ctl.ladder) - 1
    assert t - start <= 60


def test_throttles_when_hot_and_explains_why() -> None:
    ctl = ThermalController(GovernorConfig(probe=False), ladder(), setpoint_c=38.0)
    decisions = []
    for t in range(120):  # a hot die (big gap) on a skin nearing the limit: the gap loop throttles
        d = ctl(37.0 + 0.01 * t, float(t), die_c=52.0 + 0.01 * t, tokens_per_second=10.0)
        if d is not None:
            decisions.append(d)
    assert decisions and decisions[-1].actuation.rung == len(ctl.ladder) - 1
    assert "predicted" in decisions[-1].reason and "setpoint 38.0" in decisions[-1].reason
    assert decisions[-1].components.mode == "ladder"


def test_forecast_headroom_above_the_limit_lowers_the_aim() -> None:
    def run(headroom: float | None) -> float:
        ctl = ThermalController(GovernorConfig(probe=False), ladder(), setpoint_c=40.0)
        for t in range(200):
            ctl(36.0, float(t), die_c=41.0, headroom=headroom, tokens_per_second=10.0)
        return ctl.components.target_gap_k

    assert run(1.0) < run(None)  # the OS forecasts SEVERE throttling: aim lower
    assert run(0.5) == run(None)  # under the limit: no change


def test_setpoint_from_trip_points() -> None:
    cfg = GovernorConfig()
    assert cfg.resolve_setpoint([45.0, 41.0]) == 41.0 - cfg.margin_c
    assert cfg.resolve_setpoint([]) == cfg.fallback_setpoint_c
    assert GovernorConfig(setpoint_c=37.0).resolve_setpoint([41.0]) == 37.0
