"""Run the virtual phone on a simulated clock: chat traffic under the governor, unmanaged, or pinned."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.controller import Decision, GovernorConfig, ThermalController
from edgellm.device.governor.cpufreq_caps import with_frequency_caps
from edgellm.device.governor.ladder import build_ladder
from edgellm.device.telemetry.cpu import CoreCluster
from edgellm.sim.plant import ThermalPlant
from edgellm.sim.profile import PhoneProfile
from edgellm.sim.workload import Workload

# Steady state: the second half of a 30-minute run. Skin time constants of the generated phones reach
# 700 s (R 7.8 K/W × C 91 J/K), so minutes 10-15 can still be the approach to the limit, not a cycle.
STEADY_FROM_S = 900.0
RIPPLE_WINDOW_S = 30.0  # a 256-token reply takes 20-50 s: the speed a user sees per reply


@dataclass(frozen=True)
class Sample:
    """One control period of the simulation."""

    t_s: float
    skin_c: float
    die_c: float
    tokens_per_second: float
    power_w: float
    rung: int
    pacing_ms: float  # mean sleep between decode steps
    firmware_level: int  # Android thermal status 0-6 (0: no mitigation)
    position: float = 0.0  # the governor's position on the ladder path


@dataclass
class SimResult:
    """Figures of one run (decay: fractional drop of tokens/s from the first minute)."""

    profile: str
    governor: str  # on | off | pinned
    minutes: float
    mean_tokens_per_second: float
    decay_10min: float | None
    decay_30min: float | None
    peak_skin_c: float
    peak_die_c: float
    throttled_seconds: float
    p95_ttft_ratio: float
    cold_ttft_ms: float
    p95_ttft_ms: float
    setpoint_c: float | None  # the comfort limit the governor uses (and the oracle respects)
    decisions: int
    ttft_ratio_10min: float | None  # TTFT of the first request after 10 minutes over cold TTFT
    ripple: float | None = None  # (max − min) / mean of 30 s tok/s windows from minute 15 on
    ripple_from_10min: float | None = None  # the same from minute 10 (reported beside)
    shutdown_at_s: float | None = None
    actuation: str = ""  # the pinned actuation, or the last one in force
    tokens_per_second_by_minute: list[float] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        """The JSON object `edgellm simulate --json` prints (without the sample trace)."""

        def r(x: float | None, n: int) -> float | None:
            return None if x is None else round(x, n)

        return {
            "profile": self.profile,
            "governor": self.governor,
            "minutes": self.minutes,
            "mean_tokens_per_second": round(self.mean_tokens_per_second, 3),
            "decay_10min": r(self.decay_10min, 4),
            "decay_30min": r(self.decay_30min, 4),
            "ripple": r(self.ripple, 4),
            "ripple_from_10min": r(self.ripple_from_10min, 4),
            "peak_skin_c": round(self.peak_skin_c, 2),
            "peak_die_c": round(self.peak_die_c, 2),
            "throttled_seconds": round(self.throttled_seconds, 1),
            "shutdown_at_s": r(self.shutdown_at_s, 1),
            "p95_ttft_ratio": round(self.p95_ttft_ratio, 3),
            "cold_ttft_ms": round(self.cold_ttft_ms, 1),
            "p95_ttft_ms": round(self.p95_ttft_ms, 1),
            "ttft_ratio_10min": r(self.ttft_ratio_10min, 3),
            "setpoint_c": self.setpoint_c,
            "decisions": self.decisions,
            "actuation": self.actuation,
            "tokens_per_second_by_minute": [round(x, 3) for x in self.tokens_per_second_by_minute],
        }


def profile_clusters(profile: PhoneProfile) -> list[CoreCluster]:
    """The profile's clusters as sysfs would describe them."""
    return [CoreCluster(cl.cpus, cl.capacity, int(cl.max_freq_ghz * 1e6)) for cl in profile.clusters]


def skin_trips(profile: PhoneProfile) -> list[float]:
    """Skin trip points the governor can read (trip_point_*_temp of the skin zone; none if hidden)."""
    return profile.firmware.skin_trips_c() if profile.trip_points_readable else []


def comfort_limit(profile: PhoneProfile, config: GovernorConfig | None = None) -> float:
    """The comfort limit the governor uses on this phone (the oracle's constraint too)."""
    return (config or GovernorConfig()).resolve_setpoint(skin_trips(profile))


def phone_ladder(profile: PhoneProfile) -> list[Actuation]:
    """The governor's ladder on this phone: build_ladder on its topology, with capped rungs if rooted."""
    ladder = build_ladder(profile_clusters(profile), set(profile.cpus), profile.unmanaged_threads)
    return with_frequency_caps(ladder) if profile.cpufreq_writable else ladder


def unmanaged(profile: PhoneProfile) -> Actuation:
    """What MNN runs without a governor: power=high on the profile's fastest cores."""
    cpus = tuple(sorted(profile.unmanaged_cpus))
    return Actuation(profile.unmanaged_threads, cpus, cpus, label="unmanaged")


def _p95(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(0.95 * (len(s) - 1))))]


def ripple(
    samples: list[Sample], start_s: float = STEADY_FROM_S, window_s: float = RIPPLE_WINDOW_S
) -> float | None:
    """(max − min) / mean of tok/s averaged over consecutive windows from start_s on."""
    late = [s for s in samples if s.t_s > start_s]
    if not late:
        return None
    per = max(1, round(window_s / max(late[1].t_s - late[0].t_s, 1e-9))) if len(late) > 1 else 1
    means = [
        sum(s.tokens_per_second for s in late[i : i + per]) / per for i in range(0, len(late) - per + 1, per)
    ]
    avg = sum(means) / len(means) if means else 0.0
    return (max(means) - min(means)) / avg if avg > 0 else None


def simulate(
    profile: PhoneProfile,
    minutes: float,
    governor: bool = True,
    config: GovernorConfig | None = None,
    dt: float = 0.25,
    control_period_s: float = 1.0,
    sensor_resolution_c: float = 0.1,
    sensor_noise_c: float = 0.05,
    pinned: Actuation | None = None,
    die_sensor: bool = True,
) -> SimResult:
    """Simulate minutes of continuous generation: the real ThermalController, unmanaged, or pinned.

    The controller reads the skin and the hottest CPU zone as the phone reports them: quantised to
    sensor_resolution_c with Gaussian noise sensor_noise_c (seeded by the profile's name).
    """
    cfg = config or GovernorConfig()
    setpoint = comfort_limit(profile, cfg)
    ctl = ThermalController(cfg, phone_ladder(profile), setpoint) if governor and pinned is None else None
    act = pinned if pinned is not None else (ctl.current if ctl is not None else unmanaged(profile))
    mode = "pinned" if pinned is not None else ("on" if ctl is not None else "off")
    sensor = _Sensor(random.Random(zlib.crc32(profile.name.encode())), sensor_resolution_c, sensor_noise_c)
    run = _Run(profile, minutes, ctl, act, sensor, dt, max(1, round(control_period_s / dt)), die_sensor)
    steps = round(minutes * 60 / dt)
    for i in range(steps):
        run.step(i)
    return run.result(mode, setpoint, steps)


@dataclass
class _Sensor:
    """A phone's temperature sensor: quantised to resolution_c, with Gaussian noise noise_c."""

    rng: random.Random
    resolution_c: float
    noise_c: float

    def __call__(self, value: float) -> float:
        noisy = value + self.rng.gauss(0.0, self.noise_c) if self.noise_c > 0 else value
        return round(noisy / self.resolution_c) * self.resolution_c


class _Run:
    """One simulation's state: the plant, the workload, the controller (if any) and running totals."""

    def __init__(
        self,
        profile: PhoneProfile,
        minutes: float,
        ctl: ThermalController | None,
        act: Actuation,
        sense: _Sensor,
        dt: float,
        per_control: int,
        die_sensor: bool,
    ) -> None:
        self.profile, self.minutes, self.ctl, self.act = profile, minutes, ctl, act
        self.sense, self.dt, self.per_control, self.die_sensor = sense, dt, per_control, die_sensor
        self.plant = ThermalPlant(profile)
        self.work = Workload(profile.workload.prompt_tokens, profile.workload.new_tokens)
        self.decisions: list[Decision] = []
        self.samples: list[Sample] = []
        self.minute_tokens = [0.0] * int(-(-minutes // 1))
        self.total_tokens = self.throttled = 0.0
        self.shutdown_at: float | None = None
        self.peak_skin = self.peak_die = profile.ambient_c
        self.acc_tokens = self.acc_energy = 0.0
        self.last_tps = 0.0  # decode rate over the last control period, as the actuators measure it

    def step(self, i: int) -> None:
        """Advance one dt: control (each control period), generate, heat the plant, tally."""
        t = i * self.dt
        if self.ctl is not None and i % self.per_control == 0:
            self._control(self.ctl, t)
        plant, dt = self.plant, self.dt
        self.work.now = t
        tokens, energy = self.work.advance(plant, self.act, dt)
        power = self.profile.static_power_w + energy / dt
        self.throttled += dt if plant.throttled else 0.0
        plant.step(power, dt)
        if plant.shut_down and self.shutdown_at is None:
            self.shutdown_at = t + dt
        self.total_tokens += tokens
        self.minute_tokens[min(int(t // 60), len(self.minute_tokens) - 1)] += tokens
        self.peak_skin, self.peak_die = max(self.peak_skin, plant.skin_c), max(self.peak_die, plant.die_c)
        self.acc_tokens += tokens
        self.acc_energy += power * dt
        if (i + 1) % self.per_control == 0:
            self._sample(t)

    def _control(self, ctl: ThermalController, t: float) -> None:
        """One controller call on the sensed temperatures (the die first: the rng's order)."""
        die = self.sense(self.plant.cpu_zone_c) if self.die_sensor else None
        last_prefill = self.work.last_prefill_s
        age = None if last_prefill is None else t - last_prefill
        d = ctl(
            self.sense(self.plant.skin_c), t, die_c=die, tokens_per_second=self.last_tps, prefill_age_s=age
        )
        if d is not None:
            self.decisions.append(d)
            self.act = d.actuation

    def _sample(self, t: float) -> None:
        """Close a control period: record its sample and the decode rate the actuators would measure."""
        span = self.per_control * self.dt
        plant, act = self.plant, self.act
        step_s = plant.decode_cost(act)[0]
        self.samples.append(
            Sample(
                t + self.dt,
                plant.skin_c,
                plant.die_c,
                self.acc_tokens / span,
                self.acc_energy / span,
                act.rung,
                act.pause_s(step_s) * 1000.0,
                plant.firmware.status,
                self.ctl.position if self.ctl is not None else 0.0,
            )
        )
        self.last_tps = self.acc_tokens / span
        self.acc_tokens = self.acc_energy = 0.0

    def result(self, mode: str, setpoint: float, steps: int) -> SimResult:
        """The run's figures."""
        by_minute = [x / 60.0 for x in self.minute_tokens]
        ttfts = self.work.ttfts or [0.0]
        cold = ttfts[0]
        return SimResult(
            profile=self.profile.name,
            governor=mode,
            minutes=self.minutes,
            mean_tokens_per_second=self.total_tokens / (steps * self.dt),
            decay_10min=_decay(by_minute, 10),
            decay_30min=_decay(by_minute, 30),
            peak_skin_c=self.peak_skin,
            peak_die_c=self.peak_die,
            throttled_seconds=self.throttled,
            p95_ttft_ratio=_p95(ttfts) / cold if cold > 0 else 0.0,
            cold_ttft_ms=cold * 1000,
            p95_ttft_ms=_p95(ttfts) * 1000,
            setpoint_c=setpoint,
            decisions=len(self.decisions),
            ttft_ratio_10min=_ttft_ratio_after(ttfts, self.work.ttft_times, 600.0),
            ripple=ripple(self.samples),
            ripple_from_10min=ripple(self.samples, 600.0),
            shutdown_at_s=self.shutdown_at,
            actuation=self.act.describe(),
            tokens_per_second_by_minute=by_minute,
            samples=self.samples,
        )


def _decay(by_minute: list[float], minute: int) -> float | None:
    """The fractional drop of tokens/s from the first minute to this one (None if not reached)."""
    first = by_minute[0] if by_minute else 0.0
    return 1.0 - by_minute[minute - 1] / first if len(by_minute) >= minute and first > 0 else None


def _ttft_ratio_after(ttfts: list[float], times: list[float], after_s: float) -> float | None:
    """TTFT of the first request at or after after_s over the cold (first) TTFT."""
    cold = ttfts[0]
    if cold <= 0:
        return None
    return next((x / cold for x, at in zip(ttfts, times, strict=False) if at >= after_s), None)
