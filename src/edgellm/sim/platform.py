"""The virtual phone as the daemon's platform: the governor reads its tree and drives its plant.

`edgellm daemon --virtual-phone PROFILE` passes this in place of the real phone (`edgellm.platforms`).
The daemon never imports it: the readers read the tree `VirtualPhoneRuntime` writes, as they would
read a phone's sysfs, and the three things only a simulation has come through the `Platform`
methods: the plant's clock (`advance`), affinity recorded instead of applied, and the firmware's
slowdown stretching each real decode step (`extra_delay`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.actuators import Actuators
from edgellm.device.governor.platform import AndroidPlatform
from edgellm.sim.profile import PhoneProfile
from edgellm.sim.runtime import VirtualPhoneRuntime


def recorded_affinity(cpus: Iterable[int]) -> tuple[int, ...]:
    """Virtual cores do not exist on this machine: affinity is recorded, not applied."""
    return tuple(sorted(cpus))


class VirtualPhone(AndroidPlatform):
    """A simulated phone in real time (scaled by time_scale), its tree written under root."""

    name = "virtual"

    def __init__(
        self, profile: PhoneProfile, root: Path, time_scale: float = 1.0, proc_root: Path = Path("/")
    ) -> None:
        # The tree is written first: the readers probe the CPU topology when they are built.
        self.phone = VirtualPhoneRuntime(profile, root, time_scale)
        super().__init__(root, proc_root)
        self.time_scale = time_scale

    def actuators(self) -> Actuators:
        """Affinity over the simulated cores (recorded), and the firmware's slowdown as extra delay."""
        return Actuators(
            allowed=self.phone.profile.cpus, affinity=recorded_affinity, extra_delay=self.extra_delay
        )

    def extra_delay(self, act: Actuation | None, step: float) -> float:
        """The pause that stretches a real decode step of step seconds to the virtual phone's speed."""
        return step * (self.phone.slowdown(act) - 1.0)

    def ladder_threads(self, engine_threads: int) -> int:
        """The ladder runs over the simulated cores with the profile's own MNN thread count."""
        return self.phone.profile.unmanaged_threads

    def advance(self, now: float, elapsed_s: float, busy: bool, current: Actuation | None) -> float:
        """Advance the plant by elapsed_s (scaled); the controller runs on the phone's clock."""
        self.phone.advance(elapsed_s, busy, current)
        return self.phone.sim_seconds
