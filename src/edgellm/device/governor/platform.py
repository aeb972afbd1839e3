"""The phone the governor runs on: its sensors and actuators, chosen once at start-up and passed in.

`Platform` is what `GovernorRuntime` reads and drives, and nothing else: the code above it has no
branch for any particular phone (STYLE 11: readers never know their fixture trees). Two
implementations live here, for a real phone: `AndroidPlatform` (unrooted: affinity, pacing, an
ADPF hint where the NDK offers one) and `RootedPlatform` (scaling_max_freq writable too).
`phone_platform` tells them apart by probing. The virtual phone is a third, outside the daemon
(`edgellm.sim.platform`); the caller that starts the daemon picks one (`edgellm.platforms`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.actuators import Actuators
from edgellm.device.governor.adpf import PerformanceHint
from edgellm.device.governor.cpufreq_caps import CpufreqCaps, with_frequency_caps
from edgellm.device.governor.headroom import ThermalHeadroom
from edgellm.device.telemetry.battery import BatteryReader
from edgellm.device.telemetry.source import TelemetrySource


class Platform(Protocol):
    """Sensors (telemetry, headroom) and actuators (affinity, pacing, hint, caps) of one phone."""

    name: str
    telemetry: TelemetrySource  # thermal zones, cpufreq, memory, process (and battery when given)
    caps: CpufreqCaps  # frequency caps: available on a rooted phone only, else says why not
    hint: PerformanceHint  # the ADPF session, where the NDK has one
    headroom: ThermalHeadroom  # AThermal's headroom, where the NDK has one
    time_scale: float  # the platform's seconds per real second (1 on a phone)

    def actuators(self) -> Actuators:
        """The actuators in force on this platform (built once by the governor)."""
        ...

    def ladder_threads(self, engine_threads: int) -> int:
        """The thread count the ladder's rungs use, given the engine's."""
        ...

    def rungs(self, ladder: Sequence[Actuation]) -> list[Actuation]:
        """The ladder with whatever this platform adds to it (a rooted phone: capped rungs)."""
        ...

    def advance(self, now: float, elapsed_s: float, busy: bool, current: Actuation | None) -> float:
        """Let elapsed_s of real time pass; return the clock the controller runs on."""
        ...

    async def close(self) -> None:
        """Give back what the platform changed (the ADPF session, frequency limits) and its readers."""
        ...


class AndroidPlatform:
    """An unrooted phone (or any Linux): sysfs/procfs readers, affinity and pacing, an ADPF hint."""

    name = "android"
    time_scale = 1.0

    def __init__(
        self,
        sysfs_root: Path = Path("/"),
        proc_root: Path = Path("/"),
        battery: BatteryReader | None = None,
        caps: CpufreqCaps | None = None,
    ) -> None:
        self.telemetry = TelemetrySource(sysfs_root, proc_root, battery)
        # Probed even when unused, so status can say why caps are off (e.g. "needs root").
        self.caps = caps if caps is not None else CpufreqCaps(sysfs_root)
        self.hint = PerformanceHint()
        self.headroom = ThermalHeadroom()

    def actuators(self) -> Actuators:
        """Affinity over the process's own cores, pacing, and the ADPF hint where it is available."""
        return Actuators(hint=self.hint)

    def ladder_threads(self, engine_threads: int) -> int:
        """The engine's own thread count."""
        return engine_threads

    def rungs(self, ladder: Sequence[Actuation]) -> list[Actuation]:
        """The ladder as it is."""
        return list(ladder)

    def advance(self, now: float, elapsed_s: float, busy: bool, current: Actuation | None) -> float:
        """A real phone's time passes by itself: the controller runs on the real clock."""
        return now

    async def close(self) -> None:
        """Close the battery reader and the ADPF session."""
        if self.telemetry.battery is not None:
            await self.telemetry.battery.close()
        self.hint.close()


class RootedPlatform(AndroidPlatform):
    """A rooted phone: scaling_max_freq is writable, so each rung is also offered at a capped frequency."""

    name = "rooted"

    def actuators(self) -> Actuators:
        """The unrooted actuators plus frequency caps."""
        return Actuators(hint=self.hint, caps=self.caps)

    def rungs(self, ladder: Sequence[Actuation]) -> list[Actuation]:
        """Each rung, then the same rung at capped frequencies."""
        return with_frequency_caps(ladder)

    async def close(self) -> None:
        """Also put every frequency domain back to the limit it had at start."""
        await super().close()
        self.caps.restore()


def phone_platform(
    sysfs_root: Path = Path("/"), proc_root: Path = Path("/"), battery: BatteryReader | None = None
) -> AndroidPlatform:
    """The real phone under sysfs_root: rooted when a scaling_max_freq proved writable, else Android."""
    caps = CpufreqCaps(sysfs_root)
    kind = RootedPlatform if caps.available else AndroidPlatform
    return kind(sysfs_root, proc_root, battery, caps)
