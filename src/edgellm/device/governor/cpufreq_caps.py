"""Frequency caps through cpufreq's scaling_max_freq, where this process may write it (rooted phones).

An unrooted app cannot write /sys/devices/system/cpu/cpu*/cpufreq/scaling_max_freq (SELinux and file
modes), so the adapter checks each policy by writing back the value it reads; on success the
governor can cap a cluster (a cheaper actuator than pacing: power ∝ f^2.2) and `restore()` puts the
original limits back on stop. Root path injectable: tests use a fake sysfs tree.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from edgellm.common.logs import get_logger
from edgellm.device.governor.actuation import Actuation
from edgellm.device.telemetry.sysfs import parse_cpu_list, read_int, read_text

log = get_logger(__name__)


class CpufreqCaps:
    """Writable scaling_max_freq per frequency domain, or `available` False with the reason."""

    name = "scaling_max_freq"

    def __init__(
        self,
        root: Path = Path("/"),
        enabled: bool | None = None,
        write: Callable[[Path, str], object] | None = None,
    ) -> None:
        self.reason = ""
        self._write = write or (lambda path, text: path.write_text(text))
        self.domains: dict[tuple[int, ...], Path] = {}  # related cpus -> their scaling_max_freq
        self.original: dict[Path, int] = {}
        self.hw_max: dict[Path, int] = {}
        # Why gated: a daemon run as root on a laptop would otherwise cap the laptop's own CPUs.
        # Real sysfs is touched only on Android; a fake tree (any other root) always is.
        if not (enabled if enabled is not None else (sys.platform == "android" or root != Path("/"))):
            self.reason = "frequency caps are only written on Android"
            return
        for d in sorted((root / "sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq")):
            self._probe(d)
        if not self.domains and not self.reason:
            self.reason = "no cpufreq policy with scaling_max_freq"
        if self.domains:
            self.reason = ""

    def _probe(self, policy: Path) -> None:
        """Add policy's frequency domain if its scaling_max_freq takes a write, else note why not."""
        related = read_text(policy / "related_cpus")
        cpus = parse_cpu_list(related) if related else (int(policy.parent.name[3:]),)
        path = policy / "scaling_max_freq"
        if cpus in self.domains or not path.exists():
            return
        value = read_int(path)
        if value is None:
            return
        try:
            if not os.access(path, os.W_OK):
                raise PermissionError("not writable")
            self._write(path, f"{value}\n")  # a write of the same value proves we may write
        except OSError as err:
            self.reason = f"{path} is not writable ({err}): needs root"
            return
        self.domains[cpus] = path
        self.original[path] = value
        self.hw_max[path] = read_int(policy / "cpuinfo_max_freq") or value

    @property
    def available(self) -> bool:
        """Whether any frequency domain can be capped."""
        return bool(self.domains)

    def cap(self, cpus: Iterable[int], fraction: float) -> None:
        """Cap the domains holding `cpus` at fraction × their hardware maximum; others back to full."""
        wanted = set(cpus)
        for related, path in self.domains.items():
            share = fraction if wanted & set(related) else 1.0
            khz = int(self.hw_max[path] * min(max(share, 0.1), 1.0))
            try:
                self._write(path, f"{khz}\n")
            except OSError as err:
                log.warning("cpufreq_cap_failed", path=str(path), error=str(err))

    def restore(self) -> None:
        """Put every domain back to the limit it had when we started."""
        for path, khz in self.original.items():
            try:
                self._write(path, f"{khz}\n")
            except OSError as err:
                log.warning("cpufreq_restore_failed", path=str(path), error=str(err))


def with_frequency_caps(ladder: Sequence[Actuation], fractions: Sequence[float] = (0.7,)) -> list[Actuation]:
    """The ladder with each rung also offered at capped frequencies (right after it: cooler, slower).

    The probe measures every entry and the frontier keeps the capped ones that beat blending and
    pacing: memory-bound decode loses less speed than the ~f^2.2 power it saves.
    """
    out: list[Actuation] = []
    for rung in ladder:
        out.append(rung)
        out.extend(replace(rung, freq_cap=f, label=f"{rung.label}@{f:.0%}") for f in fractions)
    return [replace(r, rung=i) for i, r in enumerate(out)]
