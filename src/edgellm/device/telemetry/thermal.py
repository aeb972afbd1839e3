"""Thermal zones by type: classified (cpu, soc, gpu, skin, battery, other) and normalised to °C."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.logs import get_logger
from edgellm.device.telemetry.sysfs import read_int, read_text

log = get_logger(__name__)

# Order matters: the first matching class wins ("cpu-skin" is skin, "battery" before "bat").
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("skin", re.compile(r"skin|xo[-_]therm|quiet|sys[-_]therm|board|case|shell|back[-_]therm", re.I)),
    ("battery", re.compile(r"batt|bms|battery", re.I)),
    ("gpu", re.compile(r"gpu", re.I)),
    ("cpu", re.compile(r"cpu|cpuss|apc|little|big|mid|prime|core", re.I)),
    ("soc", re.compile(r"soc|tsens|ap[-_]|mtktscpu|exynos|aoss|ddr|modem|npu|nsp", re.I)),
)


def classify(zone_type: str) -> str:
    """The kind of a zone from its sysfs type."""
    for kind, pattern in _KINDS:
        if pattern.search(zone_type):
            return kind
    return "other"


def to_celsius(raw: int) -> float:
    """Zones report millidegrees (most), decidegrees (some MediaTek/Samsung) or degrees."""
    if abs(raw) >= 1000:
        return raw / 1000.0
    if abs(raw) >= 150:
        return raw / 10.0
    return float(raw)


@dataclass(frozen=True)
class Zone:
    """One readable thermal zone."""

    name: str
    kind: str
    celsius: float


@dataclass(frozen=True)
class ThermalSnapshot:
    """All readable zones at one instant."""

    zones: tuple[Zone, ...]

    def hottest(self, kind: str) -> float | None:
        """Highest temperature among zones of a kind."""
        values = [z.celsius for z in self.zones if z.kind == kind]
        return max(values) if values else None


@dataclass(frozen=True)
class _ZoneSource:
    name: str
    kind: str
    temp: Path
    trips_c: tuple[float, ...]


class ThermalReader:
    """Reads /sys/class/thermal/thermal_zone*/{type,temp}; zones unreadable at probe time are skipped."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self.sources: list[_ZoneSource] = []
        self.skipped: list[str] = []
        base = root / "sys/class/thermal"
        dirs = sorted(base.glob("thermal_zone*"), key=lambda p: int(re.sub(r"\D", "", p.name) or 0))
        for d in dirs:
            name = read_text(d / "type")
            raw = read_int(d / "temp")
            if name is None or raw is None:
                self.skipped.append(d.name)
                continue
            trips = tuple(
                to_celsius(v) for p in sorted(d.glob("trip_point_*_temp")) if (v := read_int(p)) is not None
            )
            self.sources.append(_ZoneSource(name, classify(name), d / "temp", trips))
        log.info(
            "thermal_probe",
            root=str(root),
            zones=len(self.sources),
            skipped=len(self.skipped),
            kinds=sorted({s.kind for s in self.sources}),
        )

    @property
    def available(self) -> bool:
        """Whether any zone could be read at probe time."""
        return bool(self.sources)

    def skin_trips_c(self) -> list[float]:
        """Trip points published by skin zones (the firmware's own thresholds), hottest-first order lost."""
        return sorted({t for s in self.sources if s.kind == "skin" for t in s.trips_c})

    def read(self) -> ThermalSnapshot:
        """Current temperatures; a zone that stops answering is left out of this snapshot."""
        zones = []
        for s in self.sources:
            raw = read_int(s.temp)
            if raw is not None:
                zones.append(Zone(s.name, s.kind, to_celsius(raw)))
        return ThermalSnapshot(tuple(zones))
