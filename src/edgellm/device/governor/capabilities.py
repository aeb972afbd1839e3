"""What the governor found on this phone: which actuators and sensors are live, and why not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard, TypeVar

from edgellm.device.governor.adpf import PerformanceHint
from edgellm.device.governor.cpufreq_caps import CpufreqCaps
from edgellm.device.governor.headroom import ThermalHeadroom
from edgellm.device.telemetry.source import Reading

Adapter = TypeVar("Adapter", CpufreqCaps, PerformanceHint, ThermalHeadroom)


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
            _live(caps),
            f"{len(caps.domains)} frequency domains" if _live(caps) else _why(caps),
        ),
        Capability(
            "adpf_performance_hint",
            "actuator",
            _live(hint),
            ("session open" if hint.live else "ready") if _live(hint) else _why(hint),
        ),
        _sensor("skin", skin, "", "no readable skin zone"),
        _sensor("cpu_zone", cpu, "die-skin gap: power meter", "unreadable"),
        _sensor("battery", battery, "", "unreadable"),
        Capability(
            "skin_trip_points",
            "sensor",
            bool(skin_trips_c),
            f"first {min(skin_trips_c):.1f} °C" if skin_trips_c else "hidden: comfort limit falls back",
        ),
        Capability(
            "athermal_headroom",
            "sensor",
            _live(headroom),
            "AThermal_getThermalHeadroom" if _live(headroom) else _why(headroom),
        ),
    )


def _sensor(name: str, value: float | None, live: str, off: str) -> Capability:
    """A sensor: live when it read a value."""
    return Capability(name, "sensor", value is not None, live if value is not None else off)


def _live(adapter: Adapter | None) -> TypeGuard[Adapter]:
    """Whether an adapter was probed and is available."""
    return adapter is not None and adapter.available


def _why(adapter: CpufreqCaps | PerformanceHint | ThermalHeadroom | None) -> str:
    return "not probed" if adapter is None else adapter.reason
