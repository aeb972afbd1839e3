"""Throttled seconds: time the governor held the engine below its fastest rung (telemetry, /metrics)."""

from __future__ import annotations

from pathlib import Path

from edgellm.device.governor.actuation import GovernorPolicy
from edgellm.device.governor.controller import GovernorConfig
from edgellm.device.governor.runtime import GovernorRuntime


def test_throttled_seconds_sum_the_time_below_the_fastest_rung(tmp_path: Path) -> None:
    gov = GovernorRuntime(
        2, GovernorConfig(policy=GovernorPolicy.PINNED), virtual_phone="sd8gen3", virtual_root=tmp_path
    )
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
