"""`edgellm config reset` reports what it put back: the settings before and after, setting by setting.

The core puts back the values the daemon started with (its command line's, else the defaults);
these pure helpers read the settings a reset touches from a status and compare two readings.
"""

from __future__ import annotations

from edgellm.device.core.state import DaemonState, SettingRestore
from edgellm.device.governor.actuation import GovernorPolicy


def settings_view(state: DaemonState, autotune: bool) -> dict[str, str]:
    """The settings a reset puts back, as they read in STATE (by UpdateConfigRequest's names).

    `pins` (cluster, power, pacing) is there only while the governor is pinned: under another
    policy the controller moves them, and a reset does not change that.
    """
    g = state.governor
    view = {
        "threads": f"{state.threads}{' (autotune)' if autotune else ''}",
        "kv_window": str(state.kv_window),
        "n_keep": str(state.n_keep),
        "governor_policy": str(g.policy),
        "setpoint_c": f"{g.setpoint_c:g}",
    }
    if g.policy == GovernorPolicy.PINNED:
        view["pins"] = f"cluster={g.cluster} power={g.power} pacing_ms={g.pacing_ms:g}"
    return view


def changes(
    before: dict[str, str], after: dict[str, str], refused: dict[str, str]
) -> tuple[SettingRestore, ...]:
    """The settings that changed between two views, and those REFUSED names (-> why not restored)."""
    names = dict.fromkeys([*before, *after])
    return tuple(
        SettingRestore(name, before.get(name, "none"), after.get(name, "none"), refused.get(name, ""))
        for name in names
        if before.get(name) != after.get(name) or name in refused
    )
