"""Run the virtual phone on a simulated clock: continuous chat traffic, governor on or off."""

from __future__ import annotations

from dataclasses import dataclass, field

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.controller import Decision, GovernorConfig, ThermalController
from edgellm.device.governor.ladder import build_ladder
from edgellm.device.telemetry.cpu import CoreCluster
from edgellm.device.virtual_phone.plant import ThermalPlant
from edgellm.device.virtual_phone.profile import PhoneProfile


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
    firmware_level: int


@dataclass
class SimResult:
    """Figures of one run (decay: fractional drop of tokens/s from the first minute)."""

    profile: str
    governor: str
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
    setpoint_c: float | None
    decisions: int
    ttft_ratio_10min: float | None  # TTFT of the first request after 10 minutes over cold TTFT
    tokens_per_second_by_minute: list[float] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        """The JSON object `edgellm simulate --json` prints (without the sample trace)."""
        return {
            "profile": self.profile,
            "governor": self.governor,
            "minutes": self.minutes,
            "mean_tokens_per_second": round(self.mean_tokens_per_second, 3),
            "decay_10min": None if self.decay_10min is None else round(self.decay_10min, 4),
            "decay_30min": None if self.decay_30min is None else round(self.decay_30min, 4),
            "peak_skin_c": round(self.peak_skin_c, 2),
            "peak_die_c": round(self.peak_die_c, 2),
            "throttled_seconds": round(self.throttled_seconds, 1),
            "p95_ttft_ratio": round(self.p95_ttft_ratio, 3),
            "cold_ttft_ms": round(self.cold_ttft_ms, 1),
            "p95_ttft_ms": round(self.p95_ttft_ms, 1),
            "ttft_ratio_10min": None if self.ttft_ratio_10min is None else round(self.ttft_ratio_10min, 3),
            "setpoint_c": self.setpoint_c,
            "decisions": self.decisions,
            "tokens_per_second_by_minute": [round(x, 3) for x in self.tokens_per_second_by_minute],
        }


def profile_clusters(profile: PhoneProfile) -> list[CoreCluster]:
    """The profile's clusters as sysfs would describe them."""
    return [CoreCluster(cl.cpus, cl.capacity, int(cl.max_freq_ghz * 1e6)) for cl in profile.clusters]


def skin_trips(profile: PhoneProfile) -> list[float]:
    """Skin trip points the phone publishes (trip_point_*_temp of its skin zone)."""
    return [lv.trip_skin_c for lv in profile.firmware]


def _p95(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(0.95 * (len(s) - 1))))]


class Workload:
    """Back-to-back requests: prefill a prompt, decode new_tokens, repeat."""

    def __init__(self, prompt_tokens: int, new_tokens: int) -> None:
        self.prompt_tokens, self.new_tokens = prompt_tokens, new_tokens
        self.prefill_left = float(prompt_tokens)
        self.decode_left = 0.0
        self.ttft_acc = 0.0
        self.ttfts: list[float] = []
        self.ttft_times: list[float] = []  # simulated time each first token came out
        self.now = 0.0

    def advance(self, plant: ThermalPlant, act: Actuation, dt: float) -> tuple[float, float]:
        """Run dt seconds; return (tokens decoded, energy in joules above static)."""
        sp = plant.speeds(act)
        left, tokens, energy = dt, 0.0, 0.0
        while left > 1e-12:
            if self.prefill_left > 0:
                need = self.prefill_left / sp.prefill_tokens_per_second
                s = min(need, left)
                self.prefill_left -= s * sp.prefill_tokens_per_second
                self.ttft_acc += s
                energy += s * sp.prefill_busy_power_w
                left -= s
                if self.prefill_left <= 1e-9:
                    self.prefill_left = 0.0
                    self.ttfts.append(self.ttft_acc)
                    self.ttft_times.append(self.now + (dt - left))
                    self.decode_left = float(self.new_tokens)
                continue
            step = 1.0 / sp.decode_tokens_per_second
            period = step + act.pause_s(step)
            s = min(self.decode_left * period, left)
            n = s / period
            tokens += n
            energy += n * step * sp.decode_busy_power_w
            self.decode_left -= n
            left -= s
            if self.decode_left <= 1e-9:
                self.prefill_left, self.ttft_acc = float(self.prompt_tokens), 0.0
        return tokens, energy


def simulate(
    profile: PhoneProfile,
    minutes: float,
    governor: bool,
    config: GovernorConfig | None = None,
    dt: float = 0.25,
    control_period_s: float = 1.0,
    sensor_resolution_c: float = 0.1,
) -> SimResult:
    """Simulate minutes of continuous generation; the real ThermalController decides when governor is on."""
    cfg = config or GovernorConfig()
    plant = ThermalPlant(profile)
    ladder = build_ladder(profile_clusters(profile), set(profile.cpus), profile.unmanaged_threads)
    fastest = ladder[0]
    if tuple(sorted(profile.unmanaged_cpus)) != fastest.cpus:  # unmanaged = what MNN's power=high picks
        fastest = Actuation(profile.unmanaged_threads, tuple(sorted(profile.unmanaged_cpus)), fastest.cpus)
    setpoint = cfg.resolve_setpoint(skin_trips(profile)) if governor else None
    ctl = ThermalController(cfg, ladder, setpoint) if setpoint is not None else None
    act = ladder[0] if ctl is not None else fastest
    work = Workload(profile.workload.prompt_tokens, profile.workload.new_tokens)
    steps = round(minutes * 60 / dt)
    per_control = max(1, round(control_period_s / dt))
    decisions: list[Decision] = []
    samples: list[Sample] = []
    minute_tokens = [0.0] * int(-(-minutes // 1))
    total_tokens = throttled = 0.0
    peak_skin = peak_die = profile.ambient_c
    acc_tokens = acc_energy = 0.0
    for i in range(steps):
        t = i * dt
        if ctl is not None and i % per_control == 0:
            reading = round(plant.skin_c / sensor_resolution_c) * sensor_resolution_c
            d = ctl(reading, t)
            if d is not None:
                decisions.append(d)
                act = d.actuation
        work.now = t
        tokens, energy = work.advance(plant, act, dt)
        power = profile.static_power_w + energy / dt
        throttled += dt if plant.throttled else 0.0
        plant.step(power, dt)
        total_tokens += tokens
        minute_tokens[min(int(t // 60), len(minute_tokens) - 1)] += tokens
        peak_skin, peak_die = max(peak_skin, plant.skin_c), max(peak_die, plant.die_c)
        acc_tokens += tokens
        acc_energy += power * dt
        if (i + 1) % per_control == 0:
            span = per_control * dt
            samples.append(
                Sample(
                    t + dt,
                    plant.skin_c,
                    plant.die_c,
                    acc_tokens / span,
                    acc_energy / span,
                    act.rung,
                    act.pause_s(1.0 / plant.speeds(act).decode_tokens_per_second) * 1000.0,
                    plant.level,
                )
            )
            acc_tokens = acc_energy = 0.0
    by_minute = [x / 60.0 for x in minute_tokens]
    first = by_minute[0] if by_minute else 0.0

    def decay(minute: int) -> float | None:
        return 1.0 - by_minute[minute - 1] / first if len(by_minute) >= minute and first > 0 else None

    ttfts = work.ttfts or [0.0]
    cold = ttfts[0]
    return SimResult(
        profile=profile.name,
        governor="on" if governor else "off",
        minutes=minutes,
        mean_tokens_per_second=total_tokens / (steps * dt),
        decay_10min=decay(10),
        decay_30min=decay(30),
        peak_skin_c=peak_skin,
        peak_die_c=peak_die,
        throttled_seconds=throttled,
        p95_ttft_ratio=_p95(ttfts) / cold if cold > 0 else 0.0,
        cold_ttft_ms=cold * 1000,
        p95_ttft_ms=_p95(ttfts) * 1000,
        setpoint_c=setpoint,
        decisions=len(decisions),
        ttft_ratio_10min=next(
            (x / cold for x, at in zip(ttfts, work.ttft_times, strict=False) if at >= 600), None
        )
        if cold > 0
        else None,
        tokens_per_second_by_minute=by_minute,
        samples=samples,
    )
