"""The virtual phone's physics: two thermal nodes, power, decode/prefill speed, firmware throttling."""

from __future__ import annotations

from dataclasses import dataclass

from edgellm.device.governor.actuation import Actuation
from edgellm.device.virtual_phone.profile import Cluster, FirmwareLevel, PhoneProfile


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
    """Die (seconds) and skin (minutes) nodes plus a battery node lagging the skin; firmware caps."""

    def __init__(self, profile: PhoneProfile) -> None:
        self.p = profile
        self.die_c = profile.ambient_c
        self.skin_c = profile.ambient_c
        self.battery_c = profile.ambient_c
        self.level = 0  # number of firmware levels engaged

    # -- firmware ---------------------------------------------------------------------------------
    @property
    def engaged(self) -> tuple[FirmwareLevel, ...]:
        """Firmware levels currently in force."""
        return self.p.firmware[: self.level]

    @property
    def throttled(self) -> bool:
        """Whether any firmware cap is in force."""
        return self.level > 0

    def update_firmware(self) -> None:
        """Engage or release levels with hysteresis on the skin temperature."""
        levels = self.p.firmware
        while self.level < len(levels) and self.skin_c >= levels[self.level].trip_skin_c:
            self.level += 1
        while self.level > 0 and self.skin_c < levels[self.level - 1].clear_skin_c:
            self.level -= 1

    def freq_ghz(self, cluster: Cluster, unthrottled: bool = False) -> float:
        """Current frequency of a cluster under the firmware caps (the phone runs at max otherwise)."""
        cap = min((lv.max_freq_ghz for lv in self.engaged), default=cluster.max_freq_ghz)
        return cluster.max_freq_ghz if unthrottled else min(cluster.max_freq_ghz, cap)

    def isolated(self) -> set[int]:
        """CPUs the firmware has taken away."""
        return {c for lv in self.engaged for c in lv.isolated_cpus}

    def memory_fraction(self) -> float:
        """Memory bandwidth left by the firmware."""
        return min((lv.memory_bandwidth_fraction for lv in self.engaged), default=1.0)

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

    # -- heat -------------------------------------------------------------------------------------
    def step(self, power_w: float, dt: float) -> None:
        """Advance the thermal nodes by dt seconds at an average power (explicit Euler, dt << die tau)."""
        p = self.p
        q_ds = (self.die_c - self.skin_c) / p.die_to_skin_resistance_k_per_w
        q_sa = (self.skin_c - p.ambient_c) / p.skin_to_ambient_resistance_k_per_w
        self.die_c += (power_w - q_ds) * dt / p.die_heat_capacity_j_per_k
        self.skin_c += (q_ds - q_sa) * dt / p.skin_heat_capacity_j_per_k
        self.battery_c += (self.skin_c - self.battery_c) * dt / p.battery_time_constant_s
        self.update_firmware()
