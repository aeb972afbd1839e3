"""Phone profiles: JSON whose keys name the physical quantity and its unit, loaded as frozen data."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgellm.sim.firmware import EmergencySpec, FirmwareLevel, FirmwareSpec, HoldSpec

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
DEFAULT_PROFILE = "sd8gen3"


@dataclass(frozen=True)
class Cluster:
    """CPUs sharing one frequency domain."""

    name: str
    cpus: tuple[int, ...]
    max_freq_ghz: float
    capacity: int  # Linux cpu_capacity (1024 = the biggest core)
    perf_per_ghz: float  # relative compute per core per GHz (biggest core = 1/max_freq_ghz · 1.0)
    power_w_per_core_at_max: float  # one busy core at max_freq_ghz
    power_exponent: float  # dynamic power ∝ f^k (voltage rises with frequency)


@dataclass(frozen=True)
class Workload:
    """Continuous chat traffic: back-to-back requests of fixed shape."""

    prompt_tokens: int
    new_tokens: int


@dataclass(frozen=True)
class PhoneProfile:
    """Everything the virtual phone needs; every number carries its unit in the JSON key."""

    name: str
    description: str
    ambient_c: float
    die_heat_capacity_j_per_k: float
    die_to_skin_resistance_k_per_w: float
    skin_heat_capacity_j_per_k: float
    skin_to_ambient_resistance_k_per_w: float
    battery_time_constant_s: float
    static_power_w: float
    clusters: tuple[Cluster, ...]
    firmware: FirmwareSpec
    decode_tokens_per_second_reference: float  # unmanaged config, no throttling
    decode_memory_fraction: float  # share of a reference decode step bound by memory
    prefill_tokens_per_second_reference: float
    decode_serial_fraction: float  # Amdahl serial share of decode, fitted from MNN at 1 and 2 threads
    prefill_serial_fraction: float  # the same for prefill
    oversubscription_efficiency: float  # throughput kept when threads outnumber cores
    unmanaged_threads: int
    unmanaged_cpus: tuple[int, ...]
    workload: Workload
    trip_points_readable: bool = True  # False: SELinux hides trip_point_*_temp (the governor falls back)
    static_to_skin_fraction: float = 0.0  # share of static power (screen, radios) heating the skin directly
    cpu_sensor_hotspot_k_per_w: float = 0.0  # the CPU zone reads die + this × CPU power (a hotspot)
    cpufreq_writable: bool = False  # rooted: the governor may write scaling_max_freq
    charging_heat_w: float = 0.0  # on a charger: battery heat into the skin (charging losses)
    starts_idle_warm: bool = (
        False  # the run starts at the idle steady state (the phone sat there), not ambient
    )

    @property
    def idle_skin_c(self) -> float:
        """Where the skin settles with the screen on and nothing decoding (static power, charging)."""
        return self.ambient_c + self.skin_to_ambient_resistance_k_per_w * (
            self.static_power_w + self.charging_heat_w
        )

    @property
    def cpus(self) -> tuple[int, ...]:
        """Every CPU, sorted."""
        return tuple(sorted(c for cl in self.clusters for c in cl.cpus))

    def cluster_of(self, cpu: int) -> Cluster:
        """The cluster holding cpu."""
        for cl in self.clusters:
            if cpu in cl.cpus:
                return cl
        raise KeyError(cpu)


def _cluster(d: dict[str, Any]) -> Cluster:
    return Cluster(
        name=str(d["name"]),
        cpus=tuple(int(c) for c in d["cpus"]),
        max_freq_ghz=float(d["max_freq_ghz"]),
        capacity=int(d["capacity"]),
        perf_per_ghz=float(d["perf_per_ghz"]),
        power_w_per_core_at_max=float(d["power_w_per_core_at_max"]),
        power_exponent=float(d["power_exponent"]),
    )


def _level(d: dict[str, Any]) -> FirmwareLevel:
    lvl = FirmwareLevel(
        trip_skin_c=float(d["trip_skin_c"]),
        clear_skin_c=float(d["clear_skin_c"]),
        max_freq_ghz=float(d["max_freq_ghz"]),
        isolated_cpus=tuple(int(c) for c in d.get("isolated_cpus", [])),
        memory_bandwidth_fraction=float(d.get("memory_bandwidth_fraction", 1.0)),
    )
    if lvl.clear_skin_c >= lvl.trip_skin_c:
        raise ValueError(f"firmware level at {lvl.trip_skin_c} °C needs clear_skin_c below its trip")
    return lvl


def _firmware(d: dict[str, Any]) -> FirmwareSpec:
    hold = d.get("hold")
    em = d.get("emergency")
    spec = FirmwareSpec(
        levels=tuple(sorted((_level(x) for x in d["levels"]), key=lambda lv: lv.trip_skin_c)),
        hold=None
        if hold is None
        else HoldSpec(
            control_skin_c=float(hold["control_skin_c"]),
            switch_on_skin_c=float(hold["switch_on_skin_c"]),
            sustainable_power_w=float(hold["sustainable_power_w"]),
            kp_w_per_k=float(hold.get("kp_w_per_k", 0.6)),
            ki_w_per_k_s=float(hold.get("ki_w_per_k_s", 0.004)),
            min_freq_fraction=float(hold.get("min_freq_fraction", 0.25)),
        ),
        emergency=None
        if em is None
        else EmergencySpec(
            trip_skin_c=float(em["trip_skin_c"]),
            clear_skin_c=float(em["clear_skin_c"]),
            online_cpus=tuple(int(c) for c in em["online_cpus"]),
            max_freq_ghz=float(em["max_freq_ghz"]),
        ),
        shutdown_skin_c=float(d["shutdown_skin_c"]),
    )
    if spec.hold is not None and spec.hold.control_skin_c <= spec.hold.switch_on_skin_c:
        raise ValueError("firmware hold: control_skin_c must be above switch_on_skin_c")
    if spec.emergency is not None and spec.emergency.clear_skin_c >= spec.emergency.trip_skin_c:
        raise ValueError("firmware emergency: clear_skin_c must be below trip_skin_c")
    if spec.shutdown_skin_c <= max(spec.skin_trips_c()[:-1], default=0.0):
        raise ValueError("firmware: shutdown_skin_c must be the hottest threshold")
    return spec


def profile_from_dict(d: dict[str, Any]) -> PhoneProfile:
    """Build and check a profile from its JSON object."""
    die, skin = d["die"], d["skin"]
    prof = PhoneProfile(
        name=str(d["name"]),
        description=str(d.get("description", "")),
        ambient_c=float(d["ambient_c"]),
        die_heat_capacity_j_per_k=float(die["heat_capacity_j_per_k"]),
        die_to_skin_resistance_k_per_w=float(die["thermal_resistance_to_skin_k_per_w"]),
        skin_heat_capacity_j_per_k=float(skin["heat_capacity_j_per_k"]),
        skin_to_ambient_resistance_k_per_w=float(skin["thermal_resistance_to_ambient_k_per_w"]),
        battery_time_constant_s=float(d["battery_time_constant_s"]),
        static_power_w=float(d["static_power_w"]),
        clusters=tuple(_cluster(c) for c in d["clusters"]),
        firmware=_firmware(d["firmware"]),
        decode_tokens_per_second_reference=float(d["decode"]["tokens_per_second_reference"]),
        decode_memory_fraction=float(d["decode"]["memory_bound_fraction"]),
        prefill_tokens_per_second_reference=float(d["prefill"]["tokens_per_second_reference"]),
        decode_serial_fraction=float(d["threads"]["decode_serial_fraction"]),
        prefill_serial_fraction=float(d["threads"]["prefill_serial_fraction"]),
        oversubscription_efficiency=float(d["threads"]["oversubscription_efficiency"]),
        unmanaged_threads=int(d["unmanaged"]["threads"]),
        unmanaged_cpus=tuple(int(c) for c in d["unmanaged"]["cpus"]),
        workload=Workload(int(d["workload"]["prompt_tokens"]), int(d["workload"]["new_tokens"])),
        trip_points_readable=bool(d.get("trip_points_readable", True)),
        static_to_skin_fraction=float(d.get("static_to_skin_fraction", 0.0)),
        cpu_sensor_hotspot_k_per_w=float(d.get("cpu_sensor_hotspot_k_per_w", 0.0)),
        cpufreq_writable=bool(d.get("cpufreq_writable", False)),
        charging_heat_w=float(d.get("charging_heat_to_skin_w", 0.0)),
        starts_idle_warm=bool(d.get("starts_idle_warm", False)),
    )
    known = set(prof.cpus)
    if not set(prof.unmanaged_cpus) <= known:
        raise ValueError(f"profile {prof.name}: unmanaged_cpus outside the clusters")
    if not 0.0 <= prof.decode_memory_fraction < 1.0:
        raise ValueError(f"profile {prof.name}: memory_bound_fraction must be in [0, 1)")
    return prof


def list_profiles() -> list[str]:
    """Names of the shipped profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name_or_path: str | Path) -> PhoneProfile:
    """A shipped profile by name, or a JSON file by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.json"
    if not path.exists():
        raise FileNotFoundError(f"no phone profile {name_or_path!r} (shipped: {', '.join(list_profiles())})")
    return profile_from_dict(json.loads(path.read_text()))


def warm_case(name: str = "sd8gen3") -> dict[str, Any]:
    """Issue 18's phone in a case on a warm day: ambient +5 °C, heat capacities ×0.8, resistances ×1.25."""
    data: dict[str, Any] = json.loads((PROFILE_DIR / f"{name}.json").read_text())
    data["name"] = f"{name}-warm-case"
    data["ambient_c"] += 5
    for node in ("die", "skin"):
        data[node]["heat_capacity_j_per_k"] *= 0.8
    data["die"]["thermal_resistance_to_skin_k_per_w"] *= 1.25
    data["skin"]["thermal_resistance_to_ambient_k_per_w"] *= 1.25
    return data
