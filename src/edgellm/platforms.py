"""The daemon's platform, chosen once at start-up: the real phone, or a virtual one (`--virtual-phone`).

The choice sits here, above both the daemon and the simulator, so `edgellm.device` never imports
`edgellm.sim`: the daemon is handed a `Platform` and has no branch for the simulator. The
`edgellm daemon` command is registered from here for the same reason (its options stay the
daemon's own, generated from DaemonConfig).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from edgellm.device import cli as daemon_cli
from edgellm.device.config import DaemonConfig

if TYPE_CHECKING:
    from edgellm.device.governor.platform import Platform

VIRTUAL_PHONE_DIR = "virtual-phone"  # under the data dir: the virtual phone's sysfs tree


def choose_platform(config: DaemonConfig) -> Platform:
    """The virtual phone config names (its tree under data_dir), else the real phone under its roots."""
    # Imported here: every `edgellm` command registers through this module, and only the daemon reads sensors.
    from edgellm.device.governor.platform import phone_platform
    from edgellm.sim.platform import VirtualPhone
    from edgellm.sim.profile import load_profile

    if not config.governor.virtual_phone:
        return phone_platform(config.governor.sysfs_root, config.governor.proc_root)

    return VirtualPhone(
        load_profile(config.governor.virtual_phone),
        config.store.data_dir / VIRTUAL_PHONE_DIR,
        config.governor.virtual_phone_time_scale,
        config.governor.proc_root,
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `daemon` subcommand, serving on the platform `choose_platform` picks."""
    daemon_cli.register(sub, choose_platform)
