"""Read-only facts about the phone: Android version, Termux install, keep-alive protections."""

from __future__ import annotations

import re
from dataclasses import dataclass

from edgellm.deploy.adb import DeployError, Phone

TERMUX_APPS = ("com.termux", "com.termux.api", "com.termux.boot")
# Installers that mean "sideloaded APK" (GitHub releases): the same signing source for our purpose.
_SIDELOAD = {"null", "", "com.android.packageinstaller", "com.google.android.packageinstaller"}
PHANTOM_MAX = 2147483647


@dataclass(frozen=True)
class PhoneFacts:
    """What the deploy needs to know before changing anything."""

    serial: str
    sdk: int
    release: str
    model: str
    installers: dict[str, str]  # package -> install source, for the Termux apps present
    termux_version: str
    debuggable: bool


@dataclass(frozen=True)
class KeepAlive:
    """Whether Android's process killers are disarmed for Termux (None: not needed here)."""

    phantom_killer_off: bool | None
    doze_whitelisted: bool

    @property
    def ok(self) -> bool:
        """True when nothing is left to do."""
        return self.phantom_killer_off is not False and self.doze_whitelisted


def parse_installers(out: str) -> dict[str, str]:
    """`pm list packages -i com.termux` lines -> {package: normalised install source}."""
    result: dict[str, str] = {}
    for line in out.splitlines():
        m = re.match(r"package:(\S+)\s+installer=(\S*)", line.strip())
        if m and m.group(1) in TERMUX_APPS:
            source = m.group(2)
            result[m.group(1)] = "sideload" if source in _SIDELOAD else source
    return result


def parse_package_dump(out: str) -> tuple[str, bool]:
    """(versionName, debuggable) from `dumpsys package com.termux | grep -E "versionName|flags"`."""
    version = ""
    debuggable = False
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("versionName=") and not version:
            version = line.split("=", 1)[1]
        if "flags=[" in line and " DEBUGGABLE " in f" {line.split('[', 1)[1]} ":
            debuggable = True
    return version, debuggable


def probe(phone: Phone) -> PhoneFacts:
    """Query versions and the Termux packages (all read-only adb commands)."""
    sdk_text = phone.getprop("ro.build.version.sdk")
    facts_sdk = int(sdk_text) if sdk_text.isdigit() else 0
    installers = parse_installers(phone.shell("pm list packages -i com.termux").stdout)
    version, debuggable = "", False
    if "com.termux" in installers:
        dump = phone.shell('dumpsys package com.termux | grep -E "versionName|flags"').stdout
        version, debuggable = parse_package_dump(dump)
    return PhoneFacts(
        serial=phone.serial,
        sdk=facts_sdk,
        release=phone.getprop("ro.build.version.release"),
        model=phone.getprop("ro.product.model"),
        installers=installers,
        termux_version=version,
        debuggable=debuggable,
    )


def check_termux(facts: PhoneFacts) -> list[str]:
    """Raise for a missing Termux or mixed install sources; return warnings for optional plugins."""
    if "com.termux" not in facts.installers:
        raise DeployError(
            "Termux is not installed: install it from F-Droid (or GitHub releases), together with "
            "Termux:API and Termux:Boot from the same source, open it once, then re-run"
        )
    sources = set(facts.installers.values())
    if len(sources) > 1:
        listing = ", ".join(f"{p} from {s}" for p, s in sorted(facts.installers.items()))
        raise DeployError(
            f"Termux apps come from different sources ({listing}); their signatures differ and the "
            "plugins will not work: reinstall all of them from one source (F-Droid or GitHub)"
        )
    warnings = []
    if facts.installers["com.termux"] == "com.android.vending":
        warnings.append("Termux from Google Play is an older build; prefer F-Droid or GitHub")
    for app, why in (
        ("com.termux.api", "no battery temperature telemetry (termux-battery-status)"),
        ("com.termux.boot", "the daemon will not start again after a reboot"),
    ):
        if app not in facts.installers:
            warnings.append(f"{app} is not installed: {why}")
    return warnings


def phantom_check_command(sdk: int) -> str | None:
    """The read-only command that shows the phantom-process killer setting (None below Android 12)."""
    if sdk >= 32:
        return "settings get global settings_enable_monitor_phantom_procs"
    if sdk == 31:
        return "device_config get activity_manager max_phantom_processes"
    return None


def phantom_fix_commands(sdk: int) -> list[str]:
    """Commands that stop Android 12+ from killing Termux's child processes."""
    if sdk >= 32:  # 12L and later have a developer setting
        return ["settings put global settings_enable_monitor_phantom_procs false"]
    if sdk == 31:  # 12: raise the limit, and stop the server config from resetting it
        return [
            "device_config set_sync_disabled_for_tests persistent",
            f"device_config put activity_manager max_phantom_processes {PHANTOM_MAX}",
        ]
    return []


DOZE_CHECK = "dumpsys deviceidle whitelist"
DOZE_FIX = "dumpsys deviceidle whitelist +com.termux"


def keepalive_status(phone: Phone, sdk: int) -> KeepAlive:
    """Read whether the phantom-process killer is off and Termux is on the Doze whitelist."""
    phantom: bool | None = None
    cmd = phantom_check_command(sdk)
    if cmd is not None:
        value = phone.shell(cmd).stdout.strip()
        phantom = value == "false" if sdk >= 32 else value == str(PHANTOM_MAX)
    doze = ",com.termux," in phone.shell(DOZE_CHECK).stdout
    return KeepAlive(phantom, doze)


def keepalive_fix_commands(sdk: int, status: KeepAlive) -> list[str]:
    """The adb commands still needed to disarm the killers."""
    cmds = phantom_fix_commands(sdk) if status.phantom_killer_off is False else []
    if not status.doze_whitelisted:
        cmds.append(DOZE_FIX)
    return cmds
