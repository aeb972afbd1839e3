"""What the governor found on this phone: which actuators and sensors are live, and why not."""

from __future__ import annotations

from dataclasses import dataclass

from edgellm.device.governor.adpf import PerformanceHint
from edgellm.device.governor.cpufreq_caps import CpufreqCaps
from edgellm.device.governor.headroom import ThermalHeadroom
from edgellm.device.telemetry.source import Reading


@dataclass(frozen=True)
class Capability:
    """One actuator or sensor: live or not, and the detail a person needs (zone, reason)."""

    name: str
    kind: str  # actuator | sensor
    live: bool
    detail: str = ""


def survey(
    reading: Reading | None,
    skin_trips_c: list[float],
    allowed_cpus: tuple[int, ...],
    caps: CpufreqCaps | None,
    hint: PerformanceHint | None,
    headroom: ThermalHeadroom | None,
) -> tuple[Capability, ...]:
    """The governor's inputs and outputs as they stand now."""
    skin = reading.skin_c if reading is not None else None
    battery = reading.battery_c if reading is not None else None
    cpu = reading.soc_c if reading is not None else None
    return (
        Capability("affinity", "actuator", True, f"sched_setaffinity within cpus {list(allowed_cpus)}"),
        Capability("pacing", "actuator", True, "sleep between decode steps (duty cycle)"),
        Capability(
            "scaling_max_freq",
            "actuator",
            caps is not None and caps.available,
            f"{len(caps.domains)} frequency domains" if caps is not None and caps.available else _why(caps),
        ),
        Capability(
            "adpf_performance_hint",
            "actuator",
            hint is not None and hint.available,
            ("session open" if hint.live else "ready") if hint is not None and hint.available else _why(hint),
        ),
        Capability("skin", "sensor", skin is not None, "" if skin is not None else "no readable skin zone"),
        Capability(
            "cpu_zone",
            "sensor",
            cpu is not None,
            "die-skin gap: power meter" if cpu is not None else "unreadable",
        ),
        Capability("battery", "sensor", battery is not None, "" if battery is not None else "unreadable"),
        Capability(
            "skin_trip_points",
            "sensor",
            bool(skin_trips_c),
            f"first {min(skin_trips_c):.1f} °C" if skin_trips_c else "hidden: comfort limit falls back",
        ),
        Capability(
            "athermal_headroom",
            "sensor",
            headroom is not None and headroom.available,
            "AThermal_getThermalHeadroom" if headroom is not None and headroom.available else _why(headroom),
        ),
    )


def _why(adapter: CpufreqCaps | PerformanceHint | ThermalHeadroom | None) -> str:
    return "not probed" if adapter is None else adapter.reason
