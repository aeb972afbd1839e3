"""The virtual phone's physics: two thermal nodes, power, decode/prefill speed, firmware throttling."""

from __future__ import annotations

from dataclasses import dataclass

from edgellm.device.governor.actuation import Actuation
from edgellm.sim.firmware import Firmware
from edgellm.sim.profile import Cluster, PhoneProfile


@dataclass(frozen=True)
class Speeds:
    """What an operating point gives right now."""

    decode_tokens_per_second: float  # without pacing
    prefill_tokens_per_second: float
    decode_busy_power_w: float  # dynamic power while decoding (MNN's workers spin through memory stalls)
    prefill_busy_power_w: float


def thread_speedup(n: float, serial_fraction: float) -> float:
    """Amdahl speed-up of n threads (fitted from MNN measured at 1 and 2 threads)."""
    return 1.0 / (serial_fraction + (1.0 - serial_fraction) / max(n, 1e-9))


class ThermalPlant:
    """Die (seconds) and skin (minutes) nodes plus a battery node lagging the skin; the thermal engine."""

    def __init__(self, profile: PhoneProfile) -> None:
        self.p = profile
        self.die_c = self.skin_c = self.battery_c = profile.ambient_c
        if profile.starts_idle_warm:  # it sat in its room (pocket, charger) with the screen on
            self.skin_c = self.battery_c = profile.idle_skin_c
            die_w = profile.static_power_w * (1.0 - profile.static_to_skin_fraction)
            self.die_c = self.skin_c + die_w * profile.die_to_skin_resistance_k_per_w
        self.firmware = Firmware(profile.firmware)
        self.cpu_power_w = 0.0  # dynamic power of the last step (the CPU zone's hotspot)
        self._act_cap: tuple[set[int], float] = (set(), 1.0)  # the actuation's own cap while computing
        self._speeds: dict[tuple[object, ...], Speeds] = {}  # speeds depend only on act + firmware state
        self._exponent = sum(cl.power_exponent for cl in profile.clusters) / len(profile.clusters)

    @property
    def cpu_zone_c(self) -> float:
        """What the hottest CPU thermal zone reads: the die node plus the hotspot of the busy cores."""
        return self.die_c + self.p.cpu_sensor_hotspot_k_per_w * self.cpu_power_w

    # -- firmware ---------------------------------------------------------------------------------
    @property
    def level(self) -> int:
        """Monitor levels engaged."""
        return self.firmware.level

    @property
    def throttled(self) -> bool:
        """Whether any firmware mitigation is in force."""
        return self.firmware.throttled

    @property
    def shut_down(self) -> bool:
        """Whether the firmware has powered the phone off (skin past its shutdown threshold)."""
        return self.firmware.shutdown

    def update_firmware(self, dt: float = 0.0, cpu_power_w: float = 0.0) -> None:
        """Let the thermal engine sample the skin (dt 0: thresholds only, no allocator step)."""
        self.firmware.update(self.skin_c, dt, cpu_power_w, self._exponent)

    def freq_ghz(self, cluster: Cluster, unthrottled: bool = False) -> float:
        """Current frequency of a cluster under the firmware caps and the governor's own scaling_max_freq."""
        if unthrottled:
            return cluster.max_freq_ghz
        cpus, fraction = self._act_cap
        own = cluster.max_freq_ghz * fraction if cpus & set(cluster.cpus) else cluster.max_freq_ghz
        return min(self.firmware.cap_ghz(cluster.max_freq_ghz), own)

    def isolated(self) -> set[int]:
        """CPUs the firmware has taken away."""
        return self.firmware.isolated(self.p.cpus)

    def memory_fraction(self) -> float:
        """Memory bandwidth left by the firmware."""
        return self.firmware.memory_fraction()

    # -- speed and power --------------------------------------------------------------------------
    def _placement(self, threads: int, cpus: tuple[int, ...], unthrottled: bool) -> list[int]:
        """Cores the threads end up on: isolated ones are replaced by the fastest other online cores."""
        if unthrottled:
            return list(cpus)
        gone = self.isolated()
        kept = [c for c in cpus if c not in gone]
        displaced = min(threads, len(cpus)) - len(kept)
        if displaced > 0:  # the kernel migrates threads off isolated cores to whatever is online
            others = [c for c in self.p.cpus if c not in gone and c not in kept]
            others.sort(key=lambda c: -self._core_perf(c, False))
            kept += others[:displaced]
        return kept or [self.p.cpus[0]]

    def _core_perf(self, cpu: int, unthrottled: bool) -> float:
        cl = self.p.cluster_of(cpu)
        return cl.perf_per_ghz * self.freq_ghz(cl, unthrottled)

    def _parallel(
        self, threads: int, cpus: tuple[int, ...], serial: float, unthrottled: bool = False
    ) -> float:
        """Thread speed-up (measured curve) of threads on cpus, times oversubscription efficiency."""
        used = min(threads, len(self._placement(threads, cpus, unthrottled)))
        eff = self.p.oversubscription_efficiency if threads > used else 1.0
        return thread_speedup(used, serial) * eff

    def _slowest(self, threads: int, cpus: tuple[int, ...], unthrottled: bool = False) -> float:
        """Compute rate of the slowest used core: barrier-synchronised threads wait for it."""
        avail = sorted(
            self._placement(threads, cpus, unthrottled), key=lambda c: -self._core_perf(c, unthrottled)
        )
        return min(self._core_perf(c, unthrottled) for c in avail[: max(1, min(threads, len(avail)))])

    def _busy_power(self, threads: int, cpus: tuple[int, ...]) -> float:
        avail = self._placement(threads, cpus, unthrottled=False)
        avail = sorted(avail, key=lambda c: -self._core_perf(c, False))[: max(threads, 1)]
        total = 0.0
        for c in avail:
            cl = self.p.cluster_of(c)
            total += cl.power_w_per_core_at_max * (self.freq_ghz(cl) / cl.max_freq_ghz) ** cl.power_exponent
        return total

    def speeds(self, act: Actuation) -> Speeds:
        """Decode and prefill speed and busy power of an operating point under the current caps.

        Decode step time = thread factor (MNN's measured curve) x [memory share / bandwidth left +
        compute share x reference core rate / slowest used core rate]: memory-bound decode scales
        sub-linearly with frequency. Prefill is compute-bound: thread factor x core rate.
        """
        fw = self.firmware
        key = (
            act.threads,
            act.cpus,
            act.prefill_cpus,
            act.freq_cap,
            fw.level,
            fw.hold_fraction,
            fw.emergency,
        )
        hit = self._speeds.get(key)
        if hit is None:
            if len(self._speeds) > 4096:
                self._speeds.clear()
            self._act_cap = (set(act.cpus) if act.freq_cap < 1.0 else set(), act.freq_cap)
            try:
                hit = self._speeds[key] = self._compute_speeds(act)
            finally:
                self._act_cap = (set(), 1.0)
        return hit

    def _compute_speeds(self, act: Actuation) -> Speeds:
        p = self.p
        n_ref, cpus_ref = p.unmanaged_threads, p.unmanaged_cpus
        ds, ps = p.decode_serial_fraction, p.prefill_serial_fraction
        perf_ref = self._slowest(n_ref, cpus_ref, unthrottled=True)
        m = p.decode_memory_fraction
        threads_rel = self._parallel(act.threads, act.cpus, ds) / self._parallel(n_ref, cpus_ref, ds, True)
        step = (
            m / self.memory_fraction() + (1.0 - m) * perf_ref / self._slowest(act.threads, act.cpus)
        ) / threads_rel
        prefill_rel = (
            self._parallel(act.threads, act.prefill_cpus, ps)
            / self._parallel(n_ref, cpus_ref, ps, True)
            * self._slowest(act.threads, act.prefill_cpus)
            / perf_ref
        )
        return Speeds(
            decode_tokens_per_second=p.decode_tokens_per_second_reference / step,
            prefill_tokens_per_second=p.prefill_tokens_per_second_reference * prefill_rel,
            decode_busy_power_w=self._busy_power(act.threads, act.cpus),
            prefill_busy_power_w=self._busy_power(act.threads, act.prefill_cpus),
        )

    def decode_cost(self, act: Actuation) -> tuple[float, float]:
        """(seconds, joules) of one decode step, averaged over a blend's two operating points."""
        sp = self.speeds(act)
        step, energy = 1.0 / sp.decode_tokens_per_second, sp.decode_busy_power_w / sp.decode_tokens_per_second
        if act.blend > 0 and act.blend_cpus:
            alt = self.speeds(act.blended())
            w = act.blend
            step = (1 - w) * step + w / alt.decode_tokens_per_second
            energy = (1 - w) * energy + w * alt.decode_busy_power_w / alt.decode_tokens_per_second
        return step, energy

    # -- heat -------------------------------------------------------------------------------------
    def step(self, power_w: float, dt: float) -> None:
        """Advance the thermal nodes by dt seconds at an average power (explicit Euler, dt << die tau)."""
        p = self.p
        direct = p.static_power_w * p.static_to_skin_fraction  # screen and radios heat the skin, not the die
        direct_skin = direct + p.charging_heat_w  # a charger's losses heat the battery under the skin
        q_ds = (self.die_c - self.skin_c) / p.die_to_skin_resistance_k_per_w
        q_sa = (self.skin_c - p.ambient_c) / p.skin_to_ambient_resistance_k_per_w
        self.die_c += (power_w - direct - q_ds) * dt / p.die_heat_capacity_j_per_k
        self.skin_c += (q_ds + direct_skin - q_sa) * dt / p.skin_heat_capacity_j_per_k
        self.battery_c += (self.skin_c - self.battery_c) * dt / p.battery_time_constant_s
        self.cpu_power_w = max(power_w - p.static_power_w, 0.0)
        self.update_firmware(dt, self.cpu_power_w)
