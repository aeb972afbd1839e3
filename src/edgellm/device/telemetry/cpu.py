"""CPU topology (clusters from related_cpus, capacity, max frequency) and per-core frequencies."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.logs import get_logger
from edgellm.device.telemetry.sysfs import parse_cpu_list, read_int, read_text

log = get_logger(__name__)


@dataclass(frozen=True)
class CoreCluster:
    """A frequency domain as sysfs describes it (related_cpus, cpu_capacity, cpuinfo_max_freq)."""

    cpus: tuple[int, ...]
    capacity: int
    max_khz: int


@dataclass(frozen=True)
class CoreFreq:
    """One core's frequency right now (0 when unreadable, e.g. offline)."""

    cpu: int
    cluster: int
    cur_khz: int
    max_khz: int


def allowed_cpus() -> tuple[int, ...]:
    """CPUs this process may run on (Android may refuse big cores to a background app)."""
    return tuple(sorted(os.sched_getaffinity(0)))


class CpuReader:
    """Reads /sys/devices/system/cpu/cpuN/{cpufreq/*,cpu_capacity}; clusters probed once."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        base = root / "sys/devices/system/cpu"
        cpus = sorted(
            int(m.group(1)) for p in base.glob("cpu[0-9]*") if (m := re.fullmatch(r"cpu(\d+)", p.name))
        )
        self.cpus = tuple(cpus)
        groups: dict[tuple[int, ...], int] = {}
        self.cluster_of: dict[int, int] = {}
        self.max_khz: dict[int, int] = {}
        capacity: dict[int, int] = {}
        for cpu in cpus:
            d = base / f"cpu{cpu}"
            related = read_text(d / "cpufreq/related_cpus")
            group = parse_cpu_list(related) if related else (cpu,)
            self.cluster_of[cpu] = groups.setdefault(group, len(groups))
            self.max_khz[cpu] = read_int(d / "cpufreq/cpuinfo_max_freq") or 0
            cap = read_int(d / "cpu_capacity")
            if cap is not None:
                capacity[cpu] = cap
        self.clusters = _clusters(groups, self.cluster_of, self.max_khz, capacity)
        log.info(
            "cpu_probe",
            root=str(root),
            cpus=len(cpus),
            clusters=[list(c.cpus) for c in self.clusters],
            freq_readable=any(self.max_khz.values()),
        )

    @property
    def available(self) -> bool:
        """Whether any CPU was found."""
        return bool(self.cpus)

    def read(self) -> tuple[CoreFreq, ...]:
        """Current frequency of every core."""
        base = self.root / "sys/devices/system/cpu"
        return tuple(
            CoreFreq(
                cpu,
                self.cluster_of[cpu],
                read_int(base / f"cpu{cpu}/cpufreq/scaling_cur_freq") or 0,
                self.max_khz[cpu],
            )
            for cpu in self.cpus
        )


def _clusters(
    groups: dict[tuple[int, ...], int],
    cluster_of: dict[int, int],
    max_khz: dict[int, int],
    capacity: dict[int, int],
) -> tuple[CoreCluster, ...]:
    """The frequency domains in probe order, each with its capacity and top frequency."""
    top = max(max_khz.values(), default=0)
    clusters = []
    for group, _index in sorted(groups.items(), key=lambda kv: kv[1]):
        members = tuple(c for c in group if c in cluster_of)
        if not members:
            continue
        cluster_khz = max(max_khz[c] for c in members)
        # Fallback when cpu_capacity is missing: scale by max frequency (same-IPC assumption).
        cap = max((capacity.get(c, 0) for c in members), default=0) or (
            int(1024 * cluster_khz / top) if top else 1024
        )
        clusters.append(CoreCluster(members, cap, cluster_khz))
    return tuple(clusters)
