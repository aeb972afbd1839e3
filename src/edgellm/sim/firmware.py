"""The virtual phone's thermal engine: monitor levels, a skin-holding power allocator, emergency, shutdown.

Modelled on what phones ship (sources in docs/governor.md): Qualcomm thermal-engine `monitor`
thresholds (frequency caps, core isolation, bandwidth) and the Android thermal HAL's severities,
the kernel's power-allocator PID that holds a zone at its control temperature with a power budget
(`sustainable_power` + PI), an emergency stage that takes the big cores offline, and a shutdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Android thermal status (AThermalStatus): what `status` reports.
NONE, LIGHT, MODERATE, SEVERE, CRITICAL, EMERGENCY, SHUTDOWN = range(7)


@dataclass(frozen=True)
class FirmwareLevel:
    """One monitor threshold: engaged above trip_skin_c, released below clear_skin_c."""

    trip_skin_c: float
    clear_skin_c: float
    max_freq_ghz: float  # cap on every cluster
    isolated_cpus: tuple[int, ...]  # cores the firmware takes away (Qualcomm "cpu isolation")
    memory_bandwidth_fraction: float  # DDR/LLCC bandwidth mitigation


@dataclass(frozen=True)
class HoldSpec:
    """Power-allocator PI on skin: budget = sustainable + kp·e + ki·∫e, applied as a frequency cap."""

    control_skin_c: float  # the temperature it holds ("desired temperature" trip)
    switch_on_skin_c: float  # it starts (and its integral resets) above this
    sustainable_power_w: float  # CPU power the vendor measured as sustainable (at 25 °C)
    kp_w_per_k: float = 0.6
    ki_w_per_k_s: float = 0.004
    min_freq_fraction: float = 0.25  # deepest cap it applies (fraction of each cluster's max)


@dataclass(frozen=True)
class EmergencySpec:
    """Above trip_skin_c only the listed cores stay online, capped at max_freq_ghz."""

    trip_skin_c: float
    clear_skin_c: float
    online_cpus: tuple[int, ...]
    max_freq_ghz: float


@dataclass(frozen=True)
class FirmwareSpec:
    """Everything the thermal engine does, hottest stage last."""

    levels: tuple[FirmwareLevel, ...]
    hold: HoldSpec | None
    emergency: EmergencySpec | None
    shutdown_skin_c: float

    def skin_trips_c(self) -> list[float]:
        """The skin trip points the phone publishes (trip_point_*_temp), coolest first."""
        trips = [lv.trip_skin_c for lv in self.levels]
        if self.hold is not None:
            trips.append(self.hold.switch_on_skin_c)
        if self.emergency is not None:
            trips.append(self.emergency.trip_skin_c)
        return sorted([*trips, self.shutdown_skin_c])


class Firmware:
    """The engine's state: monitor level, hold cap, emergency, shutdown time."""

    def __init__(self, spec: FirmwareSpec) -> None:
        self.spec = spec
        self.level = 0  # monitor levels engaged
        self.hold_fraction = 1.0  # cap from the power allocator (1 = none)
        self.hold_active = False
        self.integral_w = 0.0
        self.emergency = False
        self.shutdown = False

    @property
    def engaged(self) -> tuple[FirmwareLevel, ...]:
        """Monitor levels in force."""
        return self.spec.levels[: self.level]

    @property
    def throttled(self) -> bool:
        """Whether any mitigation is in force."""
        return self.level > 0 or self.hold_fraction < 1.0 or self.emergency or self.shutdown

    @property
    def status(self) -> int:
        """Android thermal status 0-6 (NONE ... SHUTDOWN)."""
        if self.shutdown:
            return SHUTDOWN
        if self.emergency:
            return EMERGENCY
        hold = self.spec.hold
        if hold is not None and self.hold_fraction < 1.0:
            return CRITICAL if self.hold_fraction <= hold.min_freq_fraction else SEVERE
        return min(self.level, MODERATE)

    def cap_ghz(self, cluster_max_ghz: float) -> float:
        """The frequency a cluster may run at now."""
        cap = min((lv.max_freq_ghz for lv in self.engaged), default=cluster_max_ghz)
        cap = min(cap, cluster_max_ghz, self.hold_fraction * cluster_max_ghz)
        if self.emergency and self.spec.emergency is not None:
            cap = min(cap, self.spec.emergency.max_freq_ghz)
        return cap

    def isolated(self, all_cpus: Sequence[int]) -> set[int]:
        """CPUs taken away (monitor isolation, or everything but the emergency set)."""
        gone = {c for lv in self.engaged for c in lv.isolated_cpus}
        if self.emergency and self.spec.emergency is not None:
            gone |= {c for c in all_cpus if c not in self.spec.emergency.online_cpus}
        return gone

    def memory_fraction(self) -> float:
        """Memory bandwidth left."""
        return min((lv.memory_bandwidth_fraction for lv in self.engaged), default=1.0)

    def update(self, skin_c: float, dt: float, cpu_power_w: float, exponent: float = 2.2) -> None:
        """One sampling period: monitor hysteresis, the allocator's PI step, emergency, shutdown.

        The allocator converts its budget into a cap the way IPA divides power among actors: the
        power the load would draw uncapped is cpu_power_w / fraction^exponent, and the new
        fraction grants exactly the budget (dynamic power ∝ f^exponent at these voltages).
        """
        spec = self.spec
        self._monitor(skin_c)
        if spec.hold is not None and dt > 0:
            self._allocate(spec.hold, skin_c, dt, cpu_power_w, exponent)
        em = spec.emergency
        if em is not None:
            if skin_c >= em.trip_skin_c:
                self.emergency = True
            elif skin_c < em.clear_skin_c:
                self.emergency = False
        if skin_c >= spec.shutdown_skin_c:
            self.shutdown = True  # the phone powers off: it does not come back by itself

    def _monitor(self, skin_c: float) -> None:
        """The thermal monitor's levels: engage at each trip, disengage below its clear point."""
        levels = self.spec.levels
        while self.level < len(levels) and skin_c >= levels[self.level].trip_skin_c:
            self.level += 1
        while self.level > 0 and skin_c < levels[self.level - 1].clear_skin_c:
            self.level -= 1

    def _allocate(
        self, hold: HoldSpec, skin_c: float, dt: float, cpu_power_w: float, exponent: float
    ) -> None:
        """The power allocator's PI step on the skin: a frequency fraction that grants the budget."""
        if skin_c >= hold.switch_on_skin_c:
            self.hold_active = True
        if not self.hold_active:
            return
        error = hold.control_skin_c - skin_c
        self.integral_w = min(max(self.integral_w + hold.ki_w_per_k_s * error * dt, -5.0), 1.0)
        budget = max(hold.sustainable_power_w + hold.kp_w_per_k * error + self.integral_w, 0.0)
        demand = cpu_power_w / max(self.hold_fraction, 1e-3) ** exponent
        fraction = (budget / demand) ** (1.0 / exponent) if demand > 1e-6 else 1.0
        self.hold_fraction = min(max(fraction, hold.min_freq_fraction), 1.0)
        if skin_c < hold.switch_on_skin_c and self.hold_fraction >= 1.0:
            self.hold_active, self.integral_w = False, 0.0
