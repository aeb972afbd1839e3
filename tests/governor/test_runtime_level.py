"""Throttled seconds: time the governor held the engine below its fastest rung (telemetry, /metrics)."""

from __future__ import annotations

from pathlib import Path

from edgellm.device.governor.actuation import GovernorPolicy
from edgellm.device.governor.controller import GovernorConfig
from edgellm.device.governor.platform import phone_platform
from edgellm.device.governor.runtime import GovernorRuntime
from edgellm.sim.platform import VirtualPhone
from edgellm.sim.profile import load_profile


def sd8gen3(root: Path) -> VirtualPhone:
    return VirtualPhone(load_profile("sd8gen3"), root)


def test_throttled_seconds_sum_the_time_below_the_fastest_rung(tmp_path: Path) -> None:
    gov = GovernorRuntime(2, GovernorConfig(policy=GovernorPolicy.PINNED), sd8gen3(tmp_path), period_s=1.0)
    assert len(gov.ladder) >= 2 and gov.snapshot().rung == 0
    gov.tick(0.0, 1.0)
    assert gov.throttled_seconds == 0.0  # on the fastest rung nothing counts
    gov.actuators.set(gov.ladder[-1])
    assert gov.snapshot().rung == len(gov.ladder) - 1
    gov.tick(1.0, 2.5)
    gov.tick(3.5, 0.5)
    assert gov.throttled_seconds == 3.0
    gov.actuators.set(None)  # governor off: the fastest, unmanaged
    gov.tick(4.0, 1.0)
    assert gov.throttled_seconds == 3.0 and gov.snapshot().rung == 0


def test_with_no_temperature_to_read_the_governor_does_not_throttle_and_says_so(tmp_path: Path) -> None:
    """A host, or a phone that hides its thermal zones: the controller's cool start could never be
    released, so the daemon decoded at half speed for ever. It runs the fastest rung instead."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
    blind = GovernorRuntime(2, GovernorConfig(), phone_platform(fixtures / "locked-thermal"), period_s=1.0)
    try:
        assert blind.telemetry.read().control_c is None
        assert len(blind.ladder) >= 2  # a slower rung exists that it could sit on
        assert blind.blind and blind.snapshot().rung == 0
        assert blind.snapshot().mode == "no temperature readable: not throttling"
        assert blind.tick(0.0, 1.0) is None and blind.snapshot().rung == 0 and blind.throttled_seconds == 0.0
    finally:
        blind.actuators.restore()
    seeing = GovernorRuntime(2, GovernorConfig(), sd8gen3(tmp_path), period_s=1.0)
    assert not seeing.blind and seeing.snapshot().rung == len(seeing.ladder) - 1  # the cool start, as before
    assert len(seeing.ladder) >= 2
