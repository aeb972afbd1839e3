"""The virtual phone in real time: advances the plant, writes a fake sysfs tree, slows the engine.

`edgellm daemon --virtual-phone PROFILE` runs this beside the real engine: the real readers read
the tree it writes, the real governor acts on it, and the real decode is stretched by the ratio a
firmware cap would impose (unthrottled speed / throttled speed at the same operating point).
"""

from __future__ import annotations

from pathlib import Path

from edgellm.device.governor.actuation import Actuation
from edgellm.sim.firmware import Firmware
from edgellm.sim.plant import ThermalPlant
from edgellm.sim.profile import PhoneProfile

DIE_ZONE, SKIN_ZONE, BATTERY_ZONE = "cpu-1-0-usr", "skin-therm", "battery"


class VirtualPhoneRuntime:
    """Owns a ThermalPlant and the tree under root (sys/class/thermal, sys/devices/system/cpu)."""

    def __init__(self, profile: PhoneProfile, root: Path, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.profile = profile
        self.root = root
        self.time_scale = time_scale
        self.plant = ThermalPlant(profile)
        self.sim_seconds = 0.0
        self._write_static()
        self._write_dynamic()

    def unmanaged(self) -> Actuation:
        """What the engine runs without a governor (MNN power=high on the fastest cores)."""
        p = self.profile
        return Actuation(p.unmanaged_threads, p.unmanaged_cpus, p.unmanaged_cpus)

    def _write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(path)  # readers never see a half-written value

    def _write_static(self) -> None:
        for cl in self.profile.clusters:
            related = " ".join(str(c) for c in cl.cpus)
            for cpu in cl.cpus:
                base = f"sys/devices/system/cpu/cpu{cpu}"
                self._write(f"{base}/cpufreq/related_cpus", related)
                self._write(f"{base}/cpufreq/cpuinfo_max_freq", str(int(cl.max_freq_ghz * 1e6)))
                self._write(f"{base}/cpu_capacity", str(cl.capacity))
        for i, name in enumerate((DIE_ZONE, SKIN_ZONE, BATTERY_ZONE)):
            self._write(f"sys/class/thermal/thermal_zone{i}/type", name)
        if self.profile.trip_points_readable:
            for j, trip in enumerate(self.profile.firmware.skin_trips_c()):
                self._write(f"sys/class/thermal/thermal_zone1/trip_point_{j}_temp", str(int(trip * 1000)))

    def _write_dynamic(self) -> None:
        pl = self.plant
        for i, value in enumerate((pl.cpu_zone_c, pl.skin_c, pl.battery_c)):
            self._write(f"sys/class/thermal/thermal_zone{i}/temp", str(round(value * 1000)))
        for cl in self.profile.clusters:
            for cpu in cl.cpus:
                khz = 0 if cpu in pl.isolated() else int(pl.freq_ghz(cl) * 1e6)
                self._write(f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq", str(khz))

    def advance(self, real_seconds: float, busy: bool, act: Actuation | None) -> None:
        """Advance the plant by real_seconds x time_scale at the power of what the engine is doing."""
        act = act or self.unmanaged()
        total = real_seconds * self.time_scale
        while total > 1e-9:
            dt = min(total, 0.25)
            power = self.profile.static_power_w
            if busy:
                step, energy = self.plant.decode_cost(act)
                power += energy / (step + act.pause_s(step))
            self.plant.step(power, dt)
            self.sim_seconds += dt
            total -= dt
        self._write_dynamic()

    def slowdown(self, act: Actuation | None) -> float:
        """How much slower the phone decodes now at act than unmanaged and cool (>= 1).

        The real engine runs at its own speed whatever the virtual affinity, so each real step is
        stretched by this ratio: slower rungs, blends and firmware caps all show in real tok/s
        (which the governor's start-up probe measures).
        """
        now = self.plant.decode_cost(act or self.unmanaged())[0]
        engine, self.plant.firmware = self.plant.firmware, Firmware(self.profile.firmware)
        cold = self.plant.decode_cost(self.unmanaged())[0]
        self.plant.firmware = engine
        return max(now / cold, 1.0)
