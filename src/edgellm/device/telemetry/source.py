"""All readers behind one `read()`: probed once at start (and logged), then sampled on demand."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.logs import get_logger
from edgellm.device.telemetry.battery import BatteryReader
from edgellm.device.telemetry.cpu import CoreFreq, CpuReader
from edgellm.device.telemetry.process import MemInfo, ProcessInfo, read_meminfo, read_process
from edgellm.device.telemetry.thermal import ThermalReader, Zone

log = get_logger(__name__)


@dataclass(frozen=True)
class Reading:
    """One telemetry sample of the OS side (engine and governor fields are added by the daemon)."""

    unix_time: float
    zones: tuple[Zone, ...]
    soc_c: float | None
    skin_c: float | None
    battery_c: float | None
    cores: tuple[CoreFreq, ...]
    memory: MemInfo
    process: ProcessInfo

    @property
    def control_c(self) -> float | None:
        """The temperature the governor controls: skin, else battery (the body the user holds)."""
        return self.skin_c if self.skin_c is not None else self.battery_c


class TelemetrySource:
    """Thermal zones and CPUs from sysfs_root; memory and process figures from proc_root."""

    def __init__(
        self, sysfs_root: Path = Path("/"), proc_root: Path = Path("/"), battery: BatteryReader | None = None
    ) -> None:
        self.thermal = ThermalReader(sysfs_root)
        self.cpu = CpuReader(sysfs_root)
        self.proc_root = proc_root
        self.battery = battery

    def read(self) -> Reading:
        """Sample everything readable now; unreadable parts come back empty or None."""
        snap = self.thermal.read()
        soc = snap.hottest("cpu")
        if soc is None:
            soc = snap.hottest("soc")
        battery = self.battery.cached() if self.battery is not None else None
        if battery is None:
            battery = snap.hottest("battery")
        return Reading(
            unix_time=time.time(),
            zones=snap.zones,
            soc_c=soc,
            skin_c=snap.hottest("skin"),
            battery_c=battery,
            cores=self.cpu.read(),
            memory=read_meminfo(self.proc_root),
            process=read_process(self.proc_root),
        )
